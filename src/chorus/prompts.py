"""Prompts for stimulus generation and extraction of the stimulus from a completion.

A prompt is a list of chat messages (TRL's conversational format): a system message
and a user message with the task's spec.md, its RTL (unless the task is black-box,
`show_rtl: false`), the coverage target and the answer format of the task's answer
language: a cocotb module (the shipped tasks) or a SystemVerilog testbench file (CVDP
cid012). The format never asks for a clock the design does not have. `render_prompt` turns the messages
into text with the tokenizer's chat template, or with `FALLBACK_TEMPLATE` for a
tokenizer that has none. A coverage-closure round (eval.rounds, rl.rounds) continues the
conversation: the model's answer, then the harness's feedback on it (`round_prompt`).
"""

from __future__ import annotations

import re

from chorus.tasks import Task

SYSTEM_PROMPT = (
    "You are a hardware verification engineer. You write cocotb 2.x testbench stimulus "
    "for Verilog/SystemVerilog designs that reaches the requested coverage in Verilator."
)
SYSTEM_PROMPTS = {
    "cocotb": SYSTEM_PROMPT,
    "systemverilog": (
        "You are a hardware verification engineer. You write SystemVerilog testbenches "
        "whose stimulus reaches the requested coverage of the design under test."
    ),
}
# names a design's clock input is recognised by (clk, clock, clk_i, i_clk, sys_clk, wb_clk_i,
# aclk, clk0, ...), not clock enables or dividers (clk_en, clk_div)
_CLOCK_NAME = re.compile(r"^(?:[a-z0-9]+_)*(?:clk|clock)(?:_?(?:i|in|p|\d+))?$|^[a-z]clk$", re.I)
_INPUT_DECL = re.compile(r"\binput\b([^;()]*?)(?=\binput\b|\boutput\b|\binout\b|[;)])", re.S)
_DECL_WORDS = {"wire", "logic", "reg", "bit", "signed", "unsigned", "var", "tri", "integer", "int"}
# Fallback for tokenizers without a chat template: each message as
# "<role>:\n<content>\n\n", then "assistant:\n" when a generation prompt is asked for.
FALLBACK_TEMPLATE = "{role}:\n{content}\n\n"
FALLBACK_GENERATION_PROMPT = "assistant:\n"

_FENCE_LINE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*$")
_PYTHON_TAGS = ("python", "python3", "py")
_SV_TAGS = ("systemverilog", "verilog", "sv", "v")
FENCE_TAGS = {"cocotb": "python", "systemverilog": "systemverilog"}


def clock_inputs(task: Task) -> list[str]:
    """Input ports of the design whose names say they are a clock (clk, clock, clk_i,
    i_clk, sys_clk, ...), in the order declared; empty for a combinational design."""
    found = []
    for text in task.rtl_text().values():
        text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)
        for decl in _INPUT_DECL.findall(text):
            decl = re.sub(r"\[[^\]]*\]", " ", decl)
            for name in re.findall(r"[A-Za-z_][A-Za-z0-9_$]*", decl):
                if name not in _DECL_WORDS and _CLOCK_NAME.match(name) and name not in found:
                    found.append(name)
    return found


def answer_format(task: Task) -> str:
    """What the answer must look like, for the task's answer language and design."""
    clocks = clock_inputs(task)
    if task.answer_language == "systemverilog":
        clock = f" generate the clock on `{clocks[0]}`," if clocks else ""
        return (
            f"Answer with the complete file `{task.testbench_file}` in a single ```systemverilog "
            f"block: one top-level testbench module that instantiates `{task.toplevel}` as "
            f"`{task.instance}` with its default parameters,{clock} drives its inputs and ends the "
            "simulation with $finish in bounded time. Only its input ports are stimulus: the "
            "values they receive are replayed into the design alone to measure coverage."
        )
    if clocks:
        timing = (
            f"start a clock on `{clocks[0]}` with "
            f'cocotb.start_soon(Clock(dut.{clocks[0]}, 10, unit="ns").start()), '
        )
    else:
        timing = (
            "(the design has no clock input: let time pass between input changes with "
            'await Timer(10, unit="ns")), '
        )
    return (
        "Answer with one cocotb test module in a single ```python block: one or more "
        f"@cocotb.test() coroutines that {timing}drive the design's input ports through "
        "`dut.<input>.value` and finish in bounded time. Only the top-level inputs are "
        "stimulus: writes to internal signals are not replayed and reach no coverage."
    )


def _target_text(task: Task) -> str:
    parts = []
    for metric, value in task.coverage_target.items():
        if metric == "average":
            scope = f" of instance `{task.instance}`" if task.answer_language == "systemverilog" else ""
            parts.append(f"overall average coverage{scope} >= {value:.0%}")
        else:
            parts.append(f"{metric} >= {value:.0%}")
    return ", ".join(parts)


def user_prompt(task: Task) -> str:
    design = ""
    if task.show_rtl:
        rtl = "\n\n".join(f"// {name}\n{text.rstrip()}" for name, text in task.rtl_text().items())
        design = f"## Design (top level `{task.toplevel}`)\n```systemverilog\n{rtl}\n```\n\n"
    return (
        f"# Task: {task.title}\n\n{task.spec.strip()}\n\n{design}"
        f"## Coverage target\n{_target_text(task)}\n\n{answer_format(task)}"
    )


def build_prompt(task: Task) -> list[dict]:
    """Conversational prompt (TRL's format): system + user messages."""
    return [
        {"role": "system", "content": SYSTEM_PROMPTS[task.answer_language]},
        {"role": "user", "content": user_prompt(task)},
    ]


FEEDBACK_HEADING = "## Harness feedback on your previous answer"


def feedback_turns(answer: str, feedback: str) -> list[dict]:
    """One finished round as chat turns: the model's answer, then the harness's feedback
    on it (chorus.harness.feedback.round_feedback) as the user's next message."""
    return [
        {"role": "assistant", "content": answer},
        {"role": "user", "content": f"{FEEDBACK_HEADING}\n{feedback}"},
    ]


def round_prompt(task: Task, rounds: list[tuple[str, str]]) -> list[dict]:
    """The prompt of the next coverage-closure round: build_prompt(task), then each
    earlier round's (answer, feedback) as feedback_turns. No rounds: build_prompt."""
    messages = build_prompt(task)
    for answer, feedback in rounds:
        messages += feedback_turns(answer, feedback)
    return messages


def render_prompt(tokenizer, messages: list[dict], *, add_generation_prompt: bool = True) -> str:
    """Prompt text for `generate`: the tokenizer's chat template when it has one, else
    FALLBACK_TEMPLATE per message (plus FALLBACK_GENERATION_PROMPT)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )
    text = "".join(FALLBACK_TEMPLATE.format(role=m["role"], content=m["content"]) for m in messages)
    return text + (FALLBACK_GENERATION_PROMPT if add_generation_prompt else "")


def format_completion(stimulus: str, language: str = "cocotb") -> str:
    """The answer a model should give for `stimulus` (SFT targets use this)."""
    return f"```{FENCE_TAGS[language]}\n{stimulus.strip()}\n```"


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every ``` fenced block, in order. A fence opens on a line
    of its own (```tag) and closes at the next bare ``` line; an unterminated block runs
    to the end (a completion cut off by max_new_tokens keeps its partial module). A
    closing ``` glued to the last code line (`x = 1```) also closes the block."""
    return [(tag, body) for tag, body, _ in _blocks(text)]


def is_cut_off(text: str) -> bool:
    """True when the answer's first fenced block never closes: the model was still
    writing code when it stopped (at the token cap, as a looping answer does)."""
    blocks = _blocks(text)
    return bool(blocks) and not blocks[0][2]


def _blocks(text: str) -> list[tuple[str, str, bool]]:
    """(tag, body, closed) of every fenced block (fenced_blocks' rules)."""
    blocks, tag, body = [], None, []
    for line in text.splitlines():
        if tag is None:
            match = _FENCE_LINE.match(line)
            if match:
                tag, body = match.group(1).lower(), []
            continue
        stripped = line.rstrip()
        if stripped.lstrip() == "```":
            blocks.append((tag, "\n".join(body), True))
            tag = None
        elif stripped.endswith("```") and not stripped.lstrip().startswith("```"):
            body.append(stripped[:-3])
            blocks.append((tag, "\n".join(body), True))
            tag = None
        else:
            body.append(line)
    if tag is not None:
        blocks.append((tag, "\n".join(body), False))
    return blocks


def extract_stimulus(text: str) -> str:
    """The python code of a completion: its first ```python block (```py, ```python3
    too), else its first untagged fenced block, else the whole text unchanged."""
    return extract_answer(text, "cocotb")


def extract_answer(text: str, language: str = "cocotb") -> str:
    """The code of a completion in the task's answer language: the first block tagged
    for it (```python/py/python3; ```systemverilog/verilog/sv/v), else the first
    untagged fenced block, else the whole text unchanged."""
    tags = _PYTHON_TAGS if language == "cocotb" else _SV_TAGS
    blocks = fenced_blocks(text)
    for wanted in (tags, ("",)):
        for tag, body in blocks:
            if tag in wanted:
                return body.strip() + "\n"
    return text
