"""The programmatic reference stimulus: a short constrained-random cocotb test that a
small model can learn from the spec alone.

Every design gets the same shape of program: a table of its input ports and their
widths (copied from the spec's interface table), a reset, a sweep that drives every bit
of every input both ways, then phases of corner-biased random values, each phase with
its own chance of a 1 per input bit and its own hold lengths (write-heavy and read-heavy
phases fill and drain a FIFO; long holds let a debouncer settle; short ones chase an FSM
through its transitions), and a reset in the middle of activity. What the program needs
to know of the design is in the spec: port names and widths, the clock, the reset and
its polarity, and how long its slowest behaviour needs to run (the `Budget`).
"""

from __future__ import annotations

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


def render_program(design: Design, budget: Budget = Budget(), test_name: str = "cover") -> str:
    """The program for `design`, its random phases sized by `budget`."""
    inputs = ", ".join(f'"{p.name}": {p.width}' for p in design.inputs)
    table = [f"INPUTS = {{{inputs}}}  # input ports and their widths", "", ""]
    if design.clocking is None:
        return "\n".join(_COMB_HEAD + table + _comb_body(budget, test_name)) + "\n"
    return "\n".join(_CLOCKED_HEAD + table + _clocked_body(design, budget, test_name)) + "\n"


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

# every bit of every input both ways (toggle coverage of the inputs and what they feed)
_SWEEP = [
    "    for name, width in INPUTS.items():  # every bit both ways",
    "        for bit in range(width):",
    "            await apply(dut, {name: 1 << bit})",
    "        await apply(dut, {name: (1 << width) - 1})",
    "        await apply(dut, {name: 0})",
    "    rng = random.Random(1)",
]


def _comb_body(budget: Budget, test_name: str) -> list[str]:
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
        *_SWEEP,
        f"    for _ in range({budget.phases * budget.cycles_per_phase}):",
        "        await apply(dut, {name: draw(rng, width, 0.5) for name, width in INPUTS.items()})",
    ]


def _clocked_body(design: Design, budget: Budget, test_name: str) -> list[str]:
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
        *_SWEEP,
        f"    for phase in range({budget.phases}):",
        "        ones = {name: rng.choice([0.1, 0.5, 0.9]) for name in INPUTS}",
        f"        longest = rng.choice([1, 1, 2, {budget.max_hold}])",
        "        cycles = 0",
        f"        while cycles < {budget.cycles_per_phase}:",
        "            await apply(dut, {name: draw(rng, w, ones[name]) for name, w in INPUTS.items()})",
        "            hold = rng.randint(1, longest)",
        f"            await ClockCycles(dut.{c.clock}, hold)",
        "            cycles += hold",
        "        if phase == 2:",
        "            await reset(dut)",
    ]
