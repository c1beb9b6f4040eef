"""Prompts for stimulus generation and extraction of the stimulus from a completion.

A prompt is a list of chat messages (TRL's conversational format): a system message
(the model writes cocotb stimulus) and a user message with the task's spec.md, its RTL,
the coverage target and the required answer format. `render_prompt` turns the messages
into text with the tokenizer's chat template, or with `FALLBACK_TEMPLATE` for a
tokenizer that has none.
"""

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
# Fallback for tokenizers without a chat template: each message as
# "<role>:\n<content>\n\n", then "assistant:\n" when a generation prompt is asked for.
FALLBACK_TEMPLATE = "{role}:\n{content}\n\n"
FALLBACK_GENERATION_PROMPT = "assistant:\n"

_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$")
_PYTHON_TAGS = ("python", "python3", "py")


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


def render_prompt(tokenizer, messages: list[dict], *, add_generation_prompt: bool = True) -> str:
    """Prompt text for `generate`: the tokenizer's chat template when it has one, else
    FALLBACK_TEMPLATE per message (plus FALLBACK_GENERATION_PROMPT)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    text = "".join(FALLBACK_TEMPLATE.format(role=m["role"], content=m["content"]) for m in messages)
    return text + (FALLBACK_GENERATION_PROMPT if add_generation_prompt else "")


def format_completion(stimulus: str) -> str:
    """The answer a model should give for `stimulus` (SFT targets use this)."""
    return f"```python\n{stimulus.strip()}\n```"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every ``` fenced block, in order. A fence opens on a line
    of its own (```tag) and closes at the next bare ``` line; an unterminated block runs
    to the end (a completion cut off by max_new_tokens keeps its partial module). A
    closing ``` glued to the last code line (`x = 1```) also closes the block."""
    blocks, tag, body = [], None, []
    for line in text.splitlines():
        if tag is None:
            match = _FENCE_LINE.match(line)
            if match:
                tag, body = match.group(1).lower(), []
            continue
        stripped = line.rstrip()
        if stripped.lstrip() == "```":
            blocks.append((tag, "\n".join(body)))
            tag = None
        elif stripped.endswith("```") and not stripped.lstrip().startswith("```"):
            body.append(stripped[:-3])
            blocks.append((tag, "\n".join(body)))
            tag = None
        else:
            body.append(line)
    if tag is not None:
        blocks.append((tag, "\n".join(body)))
    return blocks


def extract_stimulus(text: str) -> str:
    """The python code of a completion: its first ```python block (```py, ```python3
    too), else its first untagged fenced block, else the whole text unchanged."""
    blocks = fenced_blocks(text)
    for wanted in (_PYTHON_TAGS, ("",)):
        for tag, body in blocks:
            if tag in wanted:
                return body.strip() + "\n"
    return text
