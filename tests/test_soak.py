"""A small soak of the scorer (benchmarks/soak.py runs the 2,000-candidate one): good, bad
and hostile candidates mixed, through the evaluation path, on real Verilator."""

import importlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import FIXTURE_TASK, REPO

from chorus.harness import SandboxLimits
from chorus.harness.score import score_generations
from chorus.prompts import extract_answer


def _import_benchmark(name: str):
    sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks/ is scripts, not a package
    return importlib.import_module(name)


soak = _import_benchmark("soak")
AS_ROOT = os.geteuid() == 0


@pytest.mark.slow
def test_mixed_candidates_each_get_exactly_their_one_verdict(tmp_path):
    report = soak.soak(50, workers=2, timeout_s=4, out_jsonl=tmp_path / "scores.jsonl")
    assert report["problems"] == []
    assert report["results_on_disk"] == report["distinct_sample_ids"] == 50
    assert set(report["kinds"]) == set(soak.KINDS)  # every kind of candidate took part
    assert report["passed"] == report["statuses"]["ok"] == report["kinds"]["reference"]
    assert report["leftover_sandbox_processes"] == 0
    # the scorer does not grow with hostile candidates: they live in other processes
    # a high-water mark of the soak (the mark was reset): at least the RSS read just after
    # it (1 MB: what the scorer may allocate between the two reads)
    assert report["scorer_peak_during_soak_mb"] >= report["scorer_rss_end_mb"] - 1 > 0
    assert report["scorer_peak_during_soak_mb"] - report["scorer_rss_start_mb"] < 256


def test_check_results_catches_lost_duplicated_and_wrong_verdicts():
    rows = soak.build_mix(len(soak.KINDS), soak.soak_tasks())
    good = [{"sample_id": r["sample_id"], "status": soak.KINDS[r["kind"]].expected,
             "passed": soak.KINDS[r["kind"]].expected == "ok", "detail": ""} for r in rows]
    assert soak.check_results(rows, good) == []
    assert any("without a result" in p for p in soak.check_results(rows, good[1:]))
    assert any("more than one" in p for p in soak.check_results(rows, good + good[:1]))
    assert any("never submitted" in p for p in soak.check_results(rows[1:], good))
    flipped = [dict(r, passed=not r["passed"]) for r in good]
    assert len(soak.check_results(rows, flipped)) == len(rows)


def test_the_mix_is_deterministic_and_ids_unique():
    tasks = soak.soak_tasks()
    assert tasks[-1].id == "fx_counter" and len(tasks) == len(soak.SOAK_TASKS) + 1
    rows = soak.build_mix(200, tasks, seed=5)
    assert rows == soak.build_mix(200, tasks, seed=5)
    assert len({r["sample_id"] for r in rows}) == 200


@pytest.mark.slow
def test_a_crashed_evaluation_resumes_without_resimulating(tmp_path):
    """A first run died after half the samples, leaving its `.partial` sidecar (and a torn
    last line). The rerun keeps those results and simulates only the rest: to prove it,
    the first half's verdicts keep the first run's timings. Results are keyed by content:
    a first-half sample whose code changed is simulated again (a stale sidecar never hands
    a verdict to other code)."""
    tasks = {t.id: t for t in soak.soak_tasks()}
    # the slow kinds (timeouts, floods) add nothing to this check
    rows = [r for r in soak.build_mix(40, list(tasks.values()), seed=3)
            if soak.KINDS[r["kind"]].expected not in ("timeout", "output_limit")][:12]
    limits = SandboxLimits(timeout_s=10)
    first = score_generations(rows[:6], tasks, tmp_path / "first.jsonl", workers=2, limits=limits,
                              extract=extract_answer)
    out = tmp_path / "all.jsonl"
    partial = out.with_name("all.jsonl.partial")
    shutil.copy(tmp_path / "first.jsonl", partial)  # what the killed run had flushed
    with partial.open("a") as sidecar:
        sidecar.write('{"task_id": "torn')  # the killed writer's half-written last line
    rerun_rows = rows[:5] + [dict(rows[5], completion="def broken(:\n")] + rows[6:]

    resumed = score_generations(rerun_rows, tasks, out, workers=2, limits=limits,
                                extract=extract_answer)
    assert resumed[:5] == first[:5]  # not simulated again: the same sim_time_s
    assert resumed[5]["status"] == "syntax_error"  # its code changed: scored afresh
    assert soak.check_results(rows[:5] + rows[6:], resumed[:5] + resumed[6:]) == []
    assert out.read_text().count("\n") == len(rows) and not partial.exists()
    assert soak.leftover_sandbox_processes() == []


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["busy_loop", "fork", "output_flood", "memory_hog"])
def test_each_hostile_kind_alone(tmp_path, kind):
    """One kind at a time, so a failure names the kind that broke the scorer."""
    task = soak.soak_tasks()[-1]
    rows = [{"task_id": task.id, "sample_id": f"{kind}-{i}", "kind": kind, "completion": soak.KINDS[kind].body}
            for i in range(2)]
    results = score_generations(rows, {task.id: task}, tmp_path / "s.jsonl", workers=2,
                                limits=SandboxLimits(timeout_s=4), extract=extract_answer)
    assert soak.check_results(rows, results) == []
    assert soak.leftover_sandbox_processes() == []


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid` (read from /proc)."""
    parent_of = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent_of[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parent_of.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.slow
@pytest.mark.skipif(not AS_ROOT, reason="candidates run under sandbox uids only as root")
def test_a_killed_scorer_leaves_no_sandbox_process():
    """A preempted evaluation or RL job (SIGKILL) must not leave candidates running, and
    the next scorer removes the folder it could not (its lock died with it)."""
    scorer_code = textwrap.dedent(f"""
        from chorus.harness import SandboxLimits, score
        from chorus.tasks import load_task
        stimulus = "import cocotb, time\\n@cocotb.test()\\nasync def t(dut):\\n    time.sleep(3600)\\n"
        score(load_task({str(FIXTURE_TASK)!r}), stimulus, limits=SandboxLimits(timeout_s=600))
    """)
    scorer = subprocess.Popen([sys.executable, "-c", scorer_code])
    ours: set[int] = set()
    workdirs: set[Path] = set()
    try:
        deadline = time.monotonic() + 60
        while not (ours := _descendants(scorer.pid)) & set(soak.sandbox_processes()):
            assert scorer.poll() is None and time.monotonic() < deadline, "the candidate never started"
            time.sleep(0.2)
        time.sleep(1)  # the candidate is asleep in the simulator
        ours = _descendants(scorer.pid)
        workdirs = {Path(arg).parent.parent for pid in ours for arg in _cmdline(pid) if arg.endswith("/job.json")}
        scorer.send_signal(signal.SIGKILL)
        scorer.wait()
        time.sleep(2)
        left = [pid for pid in soak.sandbox_processes() if pid in ours]
    finally:
        scorer.kill()
        scorer.wait()
        for pid in ours:  # only this test's processes
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert left == []
    assert workdirs and all(w.is_dir() for w in workdirs)  # the killed scorer could not remove it
    from chorus.harness import score
    from chorus.tasks import load_task

    assert score(load_task(FIXTURE_TASK), "import cocotb\n").status == "runtime_error"  # the next scorer
    deadline = time.monotonic() + 60
    while any(w.exists() for w in workdirs) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(w.exists() for w in workdirs), workdirs
