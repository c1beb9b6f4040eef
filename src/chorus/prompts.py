"""Prompts for stimulus generation and extraction of the stimulus from a completion."""

from __future__ import annotations

import re

from chorus.tasks import Task

SYSTEM_PROMPT = (
    "You are a hardware verification engineer. You write cocotb 2.x testbench stimulus "
    "for Verilog/SystemVerilog designs that reaches the requested coverage in Verilator."
)
ANSWER_FORMAT = (
    "Answer with one cocotb test module in a single ```python block: one or more "
    "@cocotb.test() coroutines that start a clock on `clk` with "
    'cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start()), drive the ports through '
    "`dut` and finish in bounded time."
)
_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def user_prompt(task: Task) -> str:
    targets = ", ".join(f"{m} >= {v:.0%}" for m, v in task.coverage_target.items())
    rtl = "\n\n".join(f"// {name}\n{text.rstrip()}" for name, text in task.rtl_text().items())
    return (
        f"# Task: {task.title}\n\n{task.spec.strip()}\n\n"
        f"## Design (top level `{task.toplevel}`)\n```systemverilog\n{rtl}\n```\n\n"
        f"## Coverage target\n{targets}\n\n{ANSWER_FORMAT}"
    )


def build_prompt(task: Task) -> list[dict]:
    """Conversational prompt (TRL's format): system + user messages."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_prompt(task)},
    ]


def format_completion(stimulus: str) -> str:
    """The answer a model should give for `stimulus` (SFT targets use this)."""
    return f"```python\n{stimulus.strip()}\n```"


def extract_stimulus(text: str) -> str:
    """The python code of a completion: its first fenced block (an unterminated fence
    runs to the end), else the whole text."""
    match = _FENCE.search(text)
    return match.group(1).strip() + "\n" if match else text
