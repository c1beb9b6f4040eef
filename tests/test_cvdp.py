"""CVDP JSONL adapter: cid012 rows become loadable tasks that the harness can build;
rows of other categories are skipped; malformed rows are rejected naming row and field."""

import copy
import json

import pytest

from chorus.cvdp import CvdpFormatError, convert_cvdp_jsonl
from chorus.harness import score
from chorus.tasks import TaskFormatError, load_tasks

RTL = """module tiny_and (input logic clk, input logic rst, input logic a, input logic b,
                 output logic y);
  always_ff @(posedge clk) begin
    if (rst) y <= 1'b0;
    else if (a) y <= b;
    else y <= 1'b0;
  end
endmodule
"""
STIMULUS = """import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

@cocotb.test()
async def drive(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.a.value = 0
    dut.b.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    for a, b in ((0, 0), (1, 1), (1, 0), (0, 1)):
        dut.a.value = a
        dut.b.value = b
        await RisingEdge(dut.clk)
    await RisingEdge(dut.clk)
"""
IDLE = """import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles

@cocotb.test()
async def idle(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.a.value = 0
    dut.b.value = 0
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 4)
"""


def row(cvdp_id, categories):
    """A non-agentic CVDP row in the published shape (the design in the input context,
    a SystemVerilog testbench as the reference answer, an Xcelium harness)."""
    return {
        "id": cvdp_id,
        "categories": categories,
        "input": {
            "prompt": "Create a testbench that reaches full coverage of `tiny_and` in rtl/tiny_and.sv.",
            "context": {"rtl/tiny_and.sv": RTL},
        },
        "output": {"response": "", "context": {"verif/tb_tiny_and.sv": "module tb; endmodule\n"}},
        "harness": {
            "files": {
                "src/.env": (
                    "SIM             = xcelium\nTOPLEVEL_LANG   = verilog\n"
                    "VERILOG_SOURCES = /code/rtl/tiny_and.sv\nTOPLEVEL        = tiny_and\n"
                    "MODULE          = test_tiny_and\n"
                ),
                "docker-compose.yml": "services:\n  xrun:\n    image: __VERIF_EDA_IMAGE__\n",
                "src/test_runner.py": "# runs xrun with coverage and checks the report\n",
            }
        },
    }


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GOOD = row("cvdp_copilot_tiny_and_0001", ["cid012", "easy"])
OTHER = row("cvdp_copilot_fix_bug_0002", ["cid016", "hard"])


def malformed():
    bad = copy.deepcopy(GOOD)
    bad["id"] = "cvdp_copilot_bad_0003"
    bad["harness"]["files"]["src/.env"] = "TOPLEVEL = tiny_and\n"
    return bad


def test_cid012_row_becomes_a_task_and_other_categories_are_skipped(tmp_path):
    source = write_jsonl(tmp_path / "cvdp.jsonl", [GOOD, "", OTHER])
    tasks = convert_cvdp_jsonl(source, tmp_path / "tasks", {"line": 1.0})
    assert [t.id for t in tasks] == ["cvdp_copilot_tiny_and_0001"]
    task = tasks[0]
    assert (task.toplevel, task.difficulty, task.split) == ("tiny_and", "easy", "test")
    assert task.coverage_target == {"line": 1.0}
    assert task.spec.startswith("Create a testbench")
    assert [p.name for p in task.rtl_files] == ["tiny_and.sv"] and task.rtl_text()["tiny_and.sv"] == RTL
    # the output folder is a task root like tasks/ecov
    assert [t.id for t in load_tasks(tmp_path / "tasks")] == [task.id]
    # and the harness builds and grades it
    reference = score(task, STIMULUS)
    assert reference.status == "ok", reference.detail
    idle = score(task, IDLE)
    assert idle.status == "below_target", idle.detail


def test_a_malformed_row_in_the_file_names_row_id_and_field(tmp_path):
    source = write_jsonl(tmp_path / "mixed.jsonl", [GOOD, OTHER, malformed()])
    with pytest.raises(CvdpFormatError, match=r"'cvdp_copilot_bad_0003'.*lacks VERILOG_SOURCES"):
        convert_cvdp_jsonl(source, tmp_path / "tasks")


def _edit(path, value):
    def apply(r):
        *parents, last = path.split(":")
        node = r
        for key in parents:
            node = node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return apply


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_edit("input", KeyError), r"missing field 'input.prompt'"),
        (_edit("input:prompt", 7), r"field 'input.prompt' must be a str"),
        (_edit("input:prompt", "  "), r"'input.prompt' is empty"),
        (_edit("harness", KeyError), r"missing field 'harness.files'"),
        (_edit("harness:files", {"docker-compose.yml": ""}), r"'harness.files' has no .env file"),
        (_edit("harness:files:src/.env", "VERILOG_SOURCES=/code/rtl/tiny_and.sv\n"), r"lacks TOPLEVEL"),
        (_edit("harness:files:src/.env", "TOPLEVEL=tiny and\nVERILOG_SOURCES=/code/rtl/tiny_and.sv\n"),
         r"TOPLEVEL 'tiny and' is not a module name"),
        (_edit("harness:files:src/.env", "TOPLEVEL=tiny_and\nVERILOG_SOURCES=/code/rtl/other.sv\n"),
         r"VERILOG_SOURCES file '/code/rtl/other.sv' is not in the row's files"),
        (_edit("input:context", ["rtl/tiny_and.sv"]), r"'input.context' must be an object"),
    ],
)
def test_malformed_cid012_rows_are_rejected(tmp_path, edit, message):
    bad = copy.deepcopy(GOOD)
    edit(bad)
    source = write_jsonl(tmp_path / "bad.jsonl", [bad])
    with pytest.raises(CvdpFormatError, match=r"cvdp_copilot_tiny_and_0001.*" + message):
        convert_cvdp_jsonl(source, tmp_path / "tasks")


def test_rows_without_id_or_json_are_named_by_line(tmp_path):
    no_id = copy.deepcopy(GOOD)
    del no_id["id"]
    with pytest.raises(CvdpFormatError, match=r"no_id.jsonl:2: missing field 'id'"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "no_id.jsonl", [OTHER, no_id]), tmp_path / "t")
    with pytest.raises(CvdpFormatError, match=r"broken.jsonl:1: not valid JSON"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "broken.jsonl", ['{"id": ']), tmp_path / "t")
    with pytest.raises(CvdpFormatError, match=r"'categories' must be a list"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "cat.jsonl", [{**GOOD, "categories": "cid012"}]), tmp_path / "t")


def test_rtl_only_in_harness_files_repeated_ids_and_reruns(tmp_path):
    # the design may live in the harness files instead of the prompt's context
    hidden = copy.deepcopy(GOOD)
    hidden["input"]["context"] = {}
    hidden["harness"]["files"]["rtl/tiny_and.sv"] = RTL
    hidden["categories"] = ["cid012"]
    tasks = convert_cvdp_jsonl(write_jsonl(tmp_path / "h.jsonl", [hidden]), tmp_path / "tasks")
    assert tasks[0].difficulty == "medium"  # no difficulty category: the documented default
    assert tasks[0].coverage_target == {"line": 0.9, "branch": 0.9}

    with pytest.raises(CvdpFormatError, match=r"repeats row"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "dup.jsonl", [GOOD, GOOD]), tmp_path / "dup")

    # a rerun with other rows leaves exactly the new rows in the folder
    other = copy.deepcopy(GOOD)
    other["id"] = "cvdp_copilot_tiny_and_0009"
    convert_cvdp_jsonl(write_jsonl(tmp_path / "r.jsonl", [other]), tmp_path / "tasks")
    assert [t.id for t in load_tasks(tmp_path / "tasks")] == ["cvdp_copilot_tiny_and_0009"]


def test_bad_arguments(tmp_path):
    source = write_jsonl(tmp_path / "cvdp.jsonl", [GOOD])
    with pytest.raises(TaskFormatError, match="unknown metric 'fsm'"):
        convert_cvdp_jsonl(source, tmp_path / "t", {"fsm": 0.5})
    with pytest.raises(TaskFormatError, match=r"default_target.line"):
        convert_cvdp_jsonl(source, tmp_path / "t", {"line": 1.5})
    with pytest.raises(TaskFormatError, match="split"):
        convert_cvdp_jsonl(source, tmp_path / "t", split="holdout")
    with pytest.raises(CvdpFormatError, match="no cid012 rows"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "o.jsonl", [OTHER]), tmp_path / "t")
    with pytest.raises(CvdpFormatError, match="does not exist"):
        convert_cvdp_jsonl(tmp_path / "missing.jsonl", tmp_path / "t")
