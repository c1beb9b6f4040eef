"""A small soak of the scorer (benchmarks/soak.py runs the 2,000-candidate one): good, bad
and hostile candidates mixed, through the evaluation path, on real Verilator."""

import json
import shutil
import sys

import pytest

from chorus.harness import SandboxLimits
from chorus.harness.score import score_generations
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from soak import KINDS, build_mix, check_results, leftover_sandbox_processes, soak, soak_tasks  # noqa: E402


def test_mixed_candidates_each_get_exactly_their_one_verdict(tmp_path):
    report = soak(len(KINDS) * 4, workers=2, timeout_s=4, out_jsonl=tmp_path / "scores.jsonl")
    assert report["problems"] == []
    assert report["results_on_disk"] == report["candidates"]
    assert set(report["kinds"]) == set(KINDS)  # every kind of candidate took part
    assert report["statuses"]["ok"] == report["kinds"]["reference"]
    assert report["leftover_sandbox_processes"] == 0
    assert report["scorer_mb"] < 1024  # the scorer does not grow with hostile candidates


def test_check_results_catches_lost_duplicated_and_wrong_verdicts():
    rows = build_mix(len(KINDS), soak_tasks())
    good = [{"sample_id": r["sample_id"], "status": KINDS[r["kind"]][2],
             "passed": KINDS[r["kind"]][2] == "ok", "detail": ""} for r in rows]
    assert check_results(rows, good) == []
    assert any("without a result" in p for p in check_results(rows, good[1:]))
    assert any("more than one" in p for p in check_results(rows, good + good[:1]))
    flipped = [dict(r, passed=not r["passed"]) for r in good]
    assert len(check_results(rows, flipped)) == len(rows)


def test_a_crashed_evaluation_resumes_without_resimulating(tmp_path):
    """Results of a first run that died after half the samples (its `.partial` sidecar)
    are kept as they are, timings included, and only the rest is simulated."""
    tasks = {t.id: t for t in soak_tasks()}
    rows = [r for r in build_mix(40, list(tasks.values()), seed=3)
            if KINDS[r["kind"]][2] not in ("timeout", "output_limit")][:12]
    limits = SandboxLimits(timeout_s=10)
    first = score_generations(rows[:6], tasks, tmp_path / "first.jsonl", workers=2, limits=limits)
    crashed = tmp_path / "all.jsonl"
    shutil.copy(tmp_path / "first.jsonl", crashed.with_name("all.jsonl.partial"))
    with crashed.with_name("all.jsonl.partial").open("a") as partial:
        partial.write('{"task_id": "torn')  # the killed writer's last, half-written line
    resumed = score_generations(rows, tasks, crashed, workers=2, limits=limits)
    assert resumed[:6] == first  # same rows, same sim_time_s: not simulated again
    assert check_results(rows, resumed) == []
    assert [json.loads(line) for line in crashed.read_text().splitlines()] == resumed
    assert not crashed.with_name("all.jsonl.partial").exists()
    assert leftover_sandbox_processes() == []


@pytest.mark.parametrize("kind", ["busy_loop", "fork", "output_flood"])
def test_each_hostile_kind_alone(tmp_path, kind):
    """One kind at a time, so a failure names the kind that broke the scorer."""
    tasks = soak_tasks()[:1]
    body = KINDS[kind][1]
    rows = [{"task_id": tasks[0].id, "sample_id": f"{kind}-{i}", "kind": kind,
             "completion": f"```python\n{body}```\n"} for i in range(2)]
    results = score_generations(rows, {t.id: t for t in tasks}, tmp_path / "s.jsonl", workers=2,
                                limits=SandboxLimits(timeout_s=4))
    assert check_results(rows, results) == []
    assert leftover_sandbox_processes() == []
