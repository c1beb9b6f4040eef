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
from chorus.tasks import DEFAULT_TASK_ROOT, load_task

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

    folder = tmp_path / "fx_counter"
    shutil.copytree(Path(__file__).parent / "fixtures" / "tasks" / "fx_counter", folder)
    rtl = folder / "rtl" / "fx_counter.sv"
    rtl.write_text(rtl.read_text().replace("endmodule", "  // $random in a comment is fine\n"
                                           "  wire [31:0] noise = $urandom;\nendmodule"))
    result = score(load_task(folder), "import cocotb\n")
    assert result.status == "build_error" and "$urandom" in result.detail and "replaying" in result.detail


MULTI_TOP = """module mf_top (
  input  logic         clk,
  input  logic         rst,
  input  logic [39:0]  key,
  input  logic [99:0]  wide,
  input  logic [3:0]   sel,
  output logic [7:0]   q
);
  logic [7:0] mixed;
  mf_mix u_mix (.a(key[7:0] ^ wide[99:92]), .b(wide[7:0]), .sel(sel), .y(mixed));
  always_ff @(posedge clk) begin
    if (rst) q <= '0;
    else if (key[39]) q <= mixed;
    else if (wide[64]) q <= q + 8'd1;
  end
endmodule
"""
MULTI_SUB = """module mf_mix (input logic [7:0] a, input logic [7:0] b, input logic [3:0] sel,
               output logic [7:0] y);
  always_comb begin
    case (sel)
      4'd0: y = a & b;
      4'd1: y = a | b;
      4'd2: y = a ^ b;
      default: y = a + b;
    endcase
  end
endmodule
"""
MULTI_STIMULUS = """import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, ReadWrite, Timer


@cocotb.test()
async def drive(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.key.value = 0
    dut.wide.value = 0
    dut.sel.value = 0
    await RisingEdge(dut.clk)
    dut.rst.value = 0
    for step in range(40):
        await RisingEdge(dut.clk)  # written in the edge's own time step, after it
        dut.key.value = (step * 0x9E3779B1) & ((1 << 40) - 1) | ((step & 1) << 39)
        dut.wide.value = (step * 0x1234567890ABCDEF1234567) & ((1 << 100) - 1)
        await ReadWrite()
        dut.sel.value = step % 5  # and once more in the same time step
        await FallingEdge(dut.clk)
        if step % 7 == 0:
            await Timer(3, unit="ns")
            dut.sel.value = 15
"""


def test_replay_equals_direct_coverage_for_a_multi_file_design_with_wide_ports(tmp_path):
    """Two files (a submodule instance), ports of 40 and 100 bits, inputs written right
    after a clock edge in its own time step, twice in one step, and between edges."""
    folder = tmp_path / "mf_top"
    (folder / "rtl").mkdir(parents=True)
    (folder / "stimulus").mkdir()
    (folder / "rtl" / "mf_top.sv").write_text(MULTI_TOP)
    (folder / "rtl" / "mf_mix.sv").write_text(MULTI_SUB)
    (folder / "stimulus" / "reference.py").write_text(MULTI_STIMULUS)
    (folder / "stimulus" / "trivial.py").write_text(MULTI_STIMULUS.replace("range(40)", "range(2)"))
    (folder / "spec.md").write_text("A two-file test design.\n")
    (folder / "task.yaml").write_text(
        "id: mf_top\ntitle: two files\ndifficulty: easy\nsplit: test\ntoplevel: mf_top\n"
        "rtl: [rtl/mf_top.sv, rtl/mf_mix.sv]\ncoverage_target:\n  line: 1.0\n  toggle: 0.5\n"
    )
    task = load_task(folder)
    assert sorted(p["width"] for p in load_input_ports(ensure_build(task))) == [1, 1, 4, 40, 100]
    for name in ("reference", "trivial"):
        assert_equivalent(task, (folder / "stimulus" / f"{name}.py").read_text())
