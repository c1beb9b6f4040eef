"""Run 2 replays Run 1's recorded inputs with no candidate code (harness/replay.py): the
replayed coverage equals the coverage the candidate's own run reaches, point for point,
for every shipped task's reference and trivial stimulus and one synthetic task per
family; hostile traces are refused before anything is simulated."""

from __future__ import annotations

from pathlib import Path

import pytest

from chorus.harness import SandboxLimits, ensure_build
from chorus.harness.build import load_input_ports
from chorus.harness.cocotb_run import run_candidate
from chorus.harness.coverage import parse_coverage_points, point_id
from chorus.harness.replay import TraceError, canonical_trace, input_ports, replay
from chorus.synth import all_families
from chorus.synth.corpus import design_rng, make_design, task_id, write_task
from chorus.tasks import DEFAULT_TASK_ROOT, load_task, load_tasks

SHIPPED = sorted(DEFAULT_TASK_ROOT.glob("*/task.yaml"))


def _points(text: str) -> dict[str, int]:
    return {point_id(key): count for key, count in parse_coverage_points(text).items()}


def direct_and_replayed(task, stimulus: str) -> tuple[dict[str, int], dict[str, int]]:
    """(coverage of the candidate's own run, coverage of the replay of its inputs)."""
    build = ensure_build(task)
    run = run_candidate(stimulus, build, task.toplevel, SandboxLimits(timeout_s=120), direct_coverage=True)
    assert run.returncode == 0 and run.tests and not run.timed_out, run.log_tail
    trace, ended = canonical_trace(run.trace, [p["width"] for p in load_input_ports(build)])
    assert ended
    replayed = replay(build / task.toplevel, trace, None, keep_text=True)
    assert replayed.returncode == 0, replayed.log
    return _points(run.direct_coverage), _points(replayed.text)


def assert_equivalent(task, stimulus: str) -> None:
    direct, replayed = direct_and_replayed(task, stimulus)
    assert direct.keys() == replayed.keys()
    covered = {p for p, n in direct.items() if n}
    assert covered, "the stimulus covers nothing: no evidence"
    differ = {p: (direct[p], replayed[p]) for p in direct if bool(direct[p]) != bool(replayed[p])}
    assert not differ, f"{len(differ)} points differ (direct, replayed): {dict(list(differ.items())[:5])}"


@pytest.mark.parametrize("stimulus", ["reference", "trivial"])
@pytest.mark.parametrize("task_yaml", SHIPPED, ids=lambda p: p.parent.name)
def test_replay_equals_direct_coverage_for_shipped_tasks(task_yaml: Path, stimulus):
    task = load_task(task_yaml.parent)
    path = task_yaml.parent / "stimulus" / f"{stimulus}.py"
    assert_equivalent(task, path.read_text())


@pytest.mark.parametrize("family", sorted(all_families()))
def test_replay_equals_direct_coverage_for_each_synthetic_family(tmp_path, family):
    tid = task_id(family, "train", 11, 0)
    folder = write_task(make_design(family, 11, "train", 0), tmp_path / tid, tid, "train", 2,
                        design_rng(11, "train", 10**6))
    task = load_task(folder)
    for stimulus in sorted((folder / "stimulus").glob("*.py")):
        assert_equivalent(task, stimulus.read_text())


def test_input_ports_come_from_the_model_header():
    header = "VL_IN8(&clk,0,0);\n VL_OUT8(&q,3,0);\n VL_IN64(&k,40,0);\n VL_INW(&w,99,0,4);\n VL_INOUT8(&io,0,0);"
    assert [(p.name, p.width) for p in input_ports(header)] == [("clk", 1), ("k", 41), ("w", 100)]


WIDTHS = [1, 8]


@pytest.mark.parametrize("trace, why", [
    (b"chorus-inputs 1 3\nend 0\n", "bad header"),
    (b"chorus-inputs 1 2\n5 0:1\n3 0:0\nend 5\n", "out of order"),
    (b"chorus-inputs 1 2\n0 1:1ff\nend 0\n", "wider than port"),
    (b"chorus-inputs 1 2\n0 1:" + b"f" * 100000 + b"\nend 0\n", "bad value"),
    (b"chorus-inputs 1 2\n0 1:100\nend 0\n", "wider than port"),
    (b"chorus-inputs 1 2\n0 2:1\nend 0\n", "not an input port"),
    (b"chorus-inputs 1 2\n0 -1:1\nend 0\n", "not an input port"),
    (b"chorus-inputs 1 2\n0 dut.internal:1\nend 0\n", "not an input port"),
    (b"chorus-inputs 1 2\n0 0:x\nend 0\n", "bad value"),
    (b"chorus-inputs 1 2\n0\nend 0\n", "a step without a value"),
    (b"chorus-inputs 1 2\n1e3 0:1\nend 0\n", "bad time"),
    (b"chorus-inputs 1 2\n99999999999999999999999 0:1\n", "bad time"),
    (b"chorus-inputs 1 2\nend 0\n0 0:1\n", "after the end"),
    ("chorus-inputs 1 2\n0 0:\u00e9\n".encode(), "not ASCII"),
])
def test_hostile_traces_are_refused(trace, why):
    with pytest.raises(TraceError, match=why):
        canonical_trace(trace, WIDTHS)


def test_a_trace_is_rewritten_not_passed_on():
    text, ended = canonical_trace(b"chorus-inputs 1 2\n0 0:1 1:0ff\n7 0:0\nend 9\n", WIDTHS)
    assert ended and text == "chorus-inputs 1 2\n0 0:1 1:ff\n7 0:0\nend\n"
    assert canonical_trace(b"chorus-inputs 1 2\n0 0:1\n", WIDTHS)[1] is False  # cut short


def test_a_design_that_draws_random_numbers_is_refused(tmp_path):
    """Its behaviour does not follow from its inputs: every candidate gets build_error
    with the reason, before anything is compiled."""
    import shutil

    from chorus.harness import score

    folder = tmp_path / "noisy"
    shutil.copytree(Path(__file__).parent / "fixtures" / "tasks" / "fx_counter", folder)
    rtl = folder / "rtl" / "fx_counter.sv"
    rtl.write_text(rtl.read_text().replace("endmodule", "  // $random in a comment is fine\n"
                                           "  wire [31:0] noise = $urandom;\nendmodule"))
    result = score(load_task(folder), "import cocotb\n")
    assert result.status == "build_error" and "$urandom" in result.detail and "replaying" in result.detail
