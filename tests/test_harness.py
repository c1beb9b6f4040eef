"""Coverage harness on real Verilator: builds, coverage reading, verdicts, parallel scoring."""

import multiprocessing
import shutil
import time
from pathlib import Path

import pytest

from chorus.harness import SandboxLimits, ensure_build, read_coverage_dat, score, score_many
from chorus.harness.build import BuildError, build_key
from chorus.harness.score import dense_score, score_generations
from chorus.io import read_jsonl
from chorus.tasks import load_task

FIXTURE = Path(__file__).parent / "fixtures" / "tasks" / "fx_counter"


@pytest.fixture(scope="module")
def task():
    return load_task(FIXTURE)


@pytest.fixture(scope="module")
def cache():
    return None  # the default cache (.cache/verilator): the sandbox user must read it


def test_build_is_cached_and_keyed_by_design(task, tmp_path):
    cache = tmp_path / "cache"
    first = time.monotonic()
    build = ensure_build(task, cache)
    cold = time.monotonic() - first
    again = time.monotonic()
    assert ensure_build(task, cache) == build
    assert time.monotonic() - again < cold / 10
    assert (build / "BUILD_OK").exists() and (build / task.toplevel).exists()
    # another design (one changed line) gets its own build
    changed = tmp_path / "fx_counter"
    shutil.copytree(FIXTURE, changed)
    rtl = changed / "rtl" / "fx_counter.sv"
    rtl.write_text(rtl.read_text().replace("q + 4'd1", "q + 4'd2"))
    assert build_key(load_task(changed)) != build_key(task)


def _build_in_process(args):
    folder, cache = args
    return str(ensure_build(load_task(folder), cache))


def test_concurrent_builders_share_one_build(tmp_path):
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        builds = pool.map(_build_in_process, [(str(FIXTURE), str(tmp_path))] * 2)
    assert builds[0] == builds[1]
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == [Path(builds[0]).name]


def test_bad_rtl_is_a_build_error(tmp_path):
    cache = tmp_path / "cache"
    broken = tmp_path / "fx_counter"
    shutil.copytree(FIXTURE, broken)
    (broken / "rtl" / "fx_counter.sv").write_text("module fx_counter(input clk; endmodule\n")
    bad = load_task(broken)
    with pytest.raises(BuildError):
        ensure_build(bad, cache)
    result = score(bad, FIXTURE.joinpath("stimulus/reference.py").read_text(), cache_dir=cache)
    assert result.status == "build_error" and not result.passed


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
    partial.write_text(
        '{"task_id": "fx_counter", "sample_id": 0, "passed": true, "score": 0.5, "status": "ok"}\n{"task_'
    )
    results = score_generations(rows, {task.id: task}, out, workers=2, cache_dir=cache)
    assert [r["sample_id"] for r in results] == [0, 1, 2]
    assert results[0]["score"] == 0.5  # kept, not re-simulated
    assert results[1]["passed"] and results[1]["cov_line"] == 1.0
    assert read_jsonl(out) == results and not partial.exists()
