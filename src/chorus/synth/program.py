"""The programmatic reference stimulus: a short constrained-random cocotb test that a
small model can learn from the spec alone.

Every design gets the same shape of program: its input ports (copied from the spec's
interface table), a reset, a sweep that drives every bit of every input both ways, then
phases of corner-biased random values, each phase with its own chance of a 1 per input
bit and its own hold lengths (write-heavy and read-heavy phases fill and drain a FIFO;
long holds let a debouncer settle; short ones chase an FSM through its transitions), and
a reset in the middle of activity. What the program needs
to know of the design is in the spec: port names and widths, the clock, the reset and
its polarity, and how long its slowest behaviour needs to run (the `Budget`).

Two styles of one program (PROGRAM_STYLES): "table" lists the inputs with their widths
(`INPUTS = {"en": 1, "d": 8}`), "dut" lists their names only and reads each width from
the design when the test starts (`len(dut.d)`), so a width cannot be copied wrong. Both
draw the same random values in the same order: the same stimulus.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from chorus.synth.design import Design

# where a synthetic task keeps its programmatic reference (listed first among its variants)
PROGRAM_FILE = "stimulus/program.py"


@dataclass(frozen=True)
class Budget:
    """How long the random phases run: `phases` x `cycles_per_phase` clock cycles (or
    settle steps, combinational), `max_hold` the longest hold of one value."""

    phases: int = 8
    cycles_per_phase: int = 400
    max_hold: int = 16


BUDGET_CHOICES = {"phases": (2, 4, 8), "cycles_per_phase": (100, 200, 400), "max_hold": (4, 16)}


def draw_budgets(rng: random.Random, count: int) -> list[Budget]:
    """Up to `count` distinct budgets drawn from BUDGET_CHOICES: programs of one shape
    that run for different lengths, so a model learns the length as a choice (a slow
    design's target needs a long run; verification keeps only the ones that reach it)."""
    budgets: list[Budget] = []
    for _ in range(8 * count):
        budget = Budget(**{name: rng.choice(values) for name, values in BUDGET_CHOICES.items()})
        if budget not in budgets:
            budgets.append(budget)
        if len(budgets) == count:
            break
    return budgets


PROGRAM_STYLES = ("table", "dut")


def render_program(design: Design, budget: Budget = Budget(), test_name: str = "cover",
                   style: str = "table") -> str:
    """The program for `design`, its random phases sized by `budget`, in `style`
    (PROGRAM_STYLES): the inputs' widths written in a table, or read from the design."""
    if style == "table":
        inputs = ", ".join(f'"{p.name}": {p.width}' for p in design.inputs)
        listing = f"INPUTS = {{{inputs}}}  # input ports and their widths"
        widths = "INPUTS"
    elif style == "dut":
        names = ", ".join(f'"{p.name}"' for p in design.inputs)
        listing = f"INPUTS = [{names}]  # input ports (their widths come from the design)"
        widths = "widths"
    else:
        raise ValueError(f"unknown program style {style!r} (one of {PROGRAM_STYLES})")
    if design.clocking is None:
        lines = _COMB_HEAD + [listing, "", ""] + _comb_body(budget, test_name, widths)
    else:
        lines = _CLOCKED_HEAD + [listing, "", ""] + _clocked_body(design, budget, test_name, widths)
    return "\n".join(lines) + "\n"


def restyle_program(design: Design, text: str, style: str) -> str:
    """The program `text` (rendered by render_program for `design` in any style, at any
    budget of BUDGET_CHOICES) in `style`: the same stimulus, so a verdict of one style holds
    for the other (tests/test_synth.py). Raises ValueError for a text render_program did not write."""
    for values in itertools.product(*BUDGET_CHOICES.values()):
        budget = Budget(**dict(zip(BUDGET_CHOICES, values)))
        if text in (render_program(design, budget, style=s) for s in PROGRAM_STYLES):
            return render_program(design, budget, style=style)
    raise ValueError(f"{design.module}: not a program of chorus.synth.program (edited by hand?)")


_COMB_HEAD = ["import random", "", "import cocotb", "from cocotb.triggers import Timer", "", ""]
_CLOCKED_HEAD = [
    "import random",
    "",
    "import cocotb",
    "from cocotb.clock import Clock",
    "from cocotb.triggers import ClockCycles, FallingEdge",
    "",
    "",
]

# one value for an input: a corner (all zeros, all ones) or random bits, each bit a 1
# with probability `ones` (so a phase can hold a 1-bit input mostly high or mostly low)
_DRAW = [
    "def draw(rng, width, ones):",
    "    if rng.random() < 0.2:",
    "        return rng.choice([0, (1 << width) - 1])",
    "    return sum(1 << bit for bit in range(width) if rng.random() < ones)",
    "",
    "",
]

def _sweep(widths: str) -> list[str]:
    """Every bit of every input both ways (toggle coverage of the inputs and what they
    feed), widths from the dict named `widths`: the table, or the one read from the design."""
    # len() of a cocotb 2 handle is its width in bits: 1 for a one-bit port (LogicObject),
    # n for a vector (PackedObject)
    read = ["    widths = {name: len(getattr(dut, name)) for name in INPUTS}  # widths from the design"]
    return (read if widths == "widths" else []) + [
        f"    for name, width in {widths}.items():  # every bit both ways",
        "        for bit in range(width):",
        "            await apply(dut, {name: 1 << bit})",
        "        await apply(dut, {name: (1 << width) - 1})",
        "        await apply(dut, {name: 0})",
        "    rng = random.Random(1)",
    ]


def _comb_body(budget: Budget, test_name: str, widths: str) -> list[str]:
    return _DRAW + [
        "async def apply(dut, values):",
        "    for name, value in values.items():",
        "        getattr(dut, name).value = value",
        '    await Timer(1, unit="ns")',
        "",
        "",
        "@cocotb.test()",
        f"async def {test_name}(dut):",
        "    await apply(dut, {name: 0 for name in INPUTS})",
        *_sweep(widths),
        f"    for _ in range({budget.phases * budget.cycles_per_phase}):",
        f"        await apply(dut, {{name: draw(rng, width, 0.5) for name, width in {widths}.items()}})",
    ]


def _clocked_body(design: Design, budget: Budget, test_name: str, widths: str) -> list[str]:
    c = design.clocking
    return _DRAW + [
        "async def apply(dut, values):",
        f"    await FallingEdge(dut.{c.clock})",
        "    for name, value in values.items():",
        "        getattr(dut, name).value = value",
        "",
        "",
        "async def reset(dut):",
        f"    dut.{c.reset}.value = {c.asserted}",
        "    await apply(dut, {name: 0 for name in INPUTS})",
        f"    await ClockCycles(dut.{c.clock}, 2)",
        f"    dut.{c.reset}.value = {1 - c.asserted}",
        "",
        "",
        "@cocotb.test()",
        f"async def {test_name}(dut):",
        f'    cocotb.start_soon(Clock(dut.{c.clock}, 10, unit="ns").start())',
        "    await reset(dut)",
        *_sweep(widths),
        f"    for phase in range({budget.phases}):",
        "        ones = {name: rng.choice([0.1, 0.5, 0.9]) for name in INPUTS}",
        f"        longest = rng.choice([1, 1, 2, {budget.max_hold}])",
        "        cycles = 0",
        f"        while cycles < {budget.cycles_per_phase}:",
        f"            await apply(dut, {{name: draw(rng, w, ones[name]) for name, w in {widths}.items()}})",
        "            hold = rng.randint(1, longest)",
        f"            await ClockCycles(dut.{c.clock}, hold)",
        "            cycles += hold",
        "        if phase == 2:",
        "            await reset(dut)",
    ]
