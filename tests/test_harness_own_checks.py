"""A candidate's own checks, in both answer languages (docs/harness.md, "Replay"): a
candidate whose own test reports a failure (a cocotb test that raises, a SystemVerilog
testbench's `$error`, failed assertion or `$fatal`) gets `runtime_error`, `passed` false
and score 0, even when the inputs it drove reach every coverage target; the report is a
claim that can only cost the candidate. Messages that report no failure (`$warning`,
`$display`) change nothing. A failing assertion of the design ends the run too."""

import dataclasses
import shutil

import pytest

from chorus.harness import score
from chorus.tasks import load_task
from conftest import FIXTURE_TASK
from test_soak import soak

# the cocotb reference's vectors in the SV soak's fx_counter testbench: reset, 20 enabled
# cycles (a wrap), idle: every line and branch of fx_counter
BODY = """    repeat (2) @(posedge clk);
    rst = 0; en = 1;
    repeat (20) @(posedge clk);
    en = 0;
    repeat (2) @(posedge clk);
{ending}
    $finish;
"""


def sv_answer(ending: str) -> str:
    return soak.SV_TESTBENCHES["fx_counter"].format(body=BODY.format(ending=ending), extra="")


SV_ENDINGS = {
    "error": ('    $error("my own check failed");', "runtime_error"),
    "failed_assertion": ("    assert (q == 4'd15) else $error(\"my own check failed: q=%0d\", q);", "runtime_error"),
    "fatal": ('    $fatal(1, "my own check failed");', "runtime_error"),
    "warning": ('    $warning("a remark, not a failure");', "ok"),
    "none": ("", "ok"),
}
COCOTB_ENDINGS = {
    "failed_assert": ("    assert int(dut.q.value) == 99, 'my own check failed'\n", "runtime_error"),
    "raise": ("    raise AssertionError('my own check failed')\n", "runtime_error"),
    "none": ("", "ok"),
}


def as_testbench_task(task):
    """The same design and targets, answered with a SystemVerilog testbench."""
    return dataclasses.replace(task, answer_language="systemverilog", instance="uut",
                               testbench_file="verif/own_check_tb.sv", reference_stimulus=None,
                               trivial_stimulus=None)


@pytest.fixture(scope="module")
def sv_task():
    return as_testbench_task(load_task(FIXTURE_TASK))


def assert_own_failure_scored(result, expected: str) -> None:
    if expected == "ok":  # the same inputs, no failure reported: they reach the targets
        assert result.status == "ok" and result.passed and result.score == 1.0, result.detail
        assert result.claimed_pass is True
        return
    assert result.status == "runtime_error", (result.status, result.detail)
    assert not result.passed and result.score == 0.0 and result.coverage == {}
    assert result.claimed_pass is False
    assert "my own check failed" in result.detail


@pytest.mark.parametrize("ending", SV_ENDINGS)
def test_a_testbench_reporting_its_own_failure_does_not_pass(sv_task, cache, ending):
    text, expected = SV_ENDINGS[ending]
    result = score(sv_task, sv_answer(text), cache_dir=cache)
    assert_own_failure_scored(result, expected)


@pytest.mark.parametrize("ending", COCOTB_ENDINGS)
def test_a_cocotb_test_reporting_its_own_failure_does_not_pass(task, cache, ending):
    text, expected = COCOTB_ENDINGS[ending]
    reference = task.reference_stimulus.read_text()
    assert reference.endswith("    await RisingEdge(dut.clk)\n")  # the test's last line
    result = score(task, reference + text, cache_dir=cache)
    assert_own_failure_scored(result, expected)


@pytest.fixture(scope="module")
def asserting_task(tmp_path_factory):
    """fx_counter with an assertion of its own that the reference vectors break (q
    reaches 9 while enabled)."""
    root = tmp_path_factory.mktemp("asserting") / "fx_counter"
    shutil.copytree(FIXTURE_TASK, root)
    rtl = root / "rtl" / "fx_counter.sv"
    check = "  always_ff @(posedge clk) if (!rst) assert (q != 4'd9) else $error(\"design: q reached 9\");\n"
    rtl.write_text(rtl.read_text().replace("endmodule", check + "endmodule"))
    return load_task(root)


def test_a_failing_assertion_of_the_design_ends_the_run_in_both_languages(asserting_task, cache):
    cocotb = score(asserting_task, asserting_task.reference_stimulus.read_text(), cache_dir=cache)
    testbench = score(as_testbench_task(asserting_task), sv_answer(""), cache_dir=cache)
    for result in (cocotb, testbench):
        assert result.status == "runtime_error" and result.score == 0.0 and not result.passed, result.detail
    assert "design: q reached 9" in testbench.detail
