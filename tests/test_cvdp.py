"""CVDP JSONL adapter: cid012 rows become loadable tasks that the harness can build."""

import json

import pytest

from chorus.cvdp import CvdpFormatError, convert_cvdp_jsonl
from chorus.harness import score

RTL = """module tiny_and (input logic clk, input logic a, input logic b, output logic y);
  always_ff @(posedge clk) begin
    if (a) y <= b;
    else y <= 1'b0;
  end
endmodule
"""
STIMULUS = """import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge

@cocotb.test()
async def drive(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    for a, b in ((0, 0), (1, 1), (1, 0)):
        dut.a.value = a
        dut.b.value = b
        await RisingEdge(dut.clk)
"""


def row(cvdp_id, categories, **overrides):
    data = {
        "id": cvdp_id,
        "categories": categories,
        "input": {"prompt": "Write stimulus for tiny_and.", "context": {"rtl/tiny_and.sv": RTL}},
        "output": {"response": "", "context": {}},
        "harness": {
            "files": {
                "src/.env": "TOPLEVEL=tiny_and\nVERILOG_SOURCES=/code/rtl/tiny_and.sv\n",
                "docker-compose.yml": "services: {}\n",
                "src/test_runner.py": "# xcelium runner\n",
            }
        },
    }
    data.update(overrides)
    return data


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cid012_rows_become_tasks_others_are_skipped(tmp_path):
    source = write_jsonl(
        tmp_path / "cvdp.jsonl",
        [row("cvdp_copilot_tiny_and_0001", ["cid012", "easy"]), row("cvdp_copilot_fix_0002", ["cid016", "hard"])],
    )
    tasks = convert_cvdp_jsonl(source, tmp_path / "tasks", {"line": 1.0, "branch": 1.0})
    assert [t.id for t in tasks] == ["cvdp_copilot_tiny_and_0001"]
    task = tasks[0]
    assert task.toplevel == "tiny_and" and task.difficulty == "easy" and task.split == "test"
    assert task.spec.startswith("Write stimulus")
    result = score(task, STIMULUS)
    assert result.status == "ok", result.detail


def test_malformed_row_names_row_and_field(tmp_path):
    bad = row("cvdp_copilot_bad_0003", ["cid012"])
    bad["harness"]["files"]["src/.env"] = "TOPLEVEL=tiny_and\n"
    source = write_jsonl(tmp_path / "bad.jsonl", [bad])
    with pytest.raises(CvdpFormatError, match="cvdp_copilot_bad_0003.*VERILOG_SOURCES"):
        convert_cvdp_jsonl(source, tmp_path / "tasks")
    missing = row("cvdp_copilot_bad_0004", ["cid012"])
    del missing["input"]
    with pytest.raises(CvdpFormatError, match="cvdp_copilot_bad_0004.*input.prompt"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "m.jsonl", [missing]), tmp_path / "tasks")
