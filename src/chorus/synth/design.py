"""What a family generator returns, and the shared pieces generators are written with:
the coding-style choices, the ANSI module header, the spec and the cocotb stimulus.

A family knows its design, so it also knows how to exercise it: it returns the reference
stimulus as a list of `Step`s (input values, then cycles to wait) computed from that
knowledge (every FSM transition, every opcode, every wrap). `render_stimulus` writes the
steps as a cocotb module in one of several coding styles, which gives each design several
different, equally valid reference stimuli (the variants).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Port:
    name: str
    direction: str  # input | output
    width: int
    description: str
    signed: bool = False


@dataclass
class Step:
    """Drive `values` (port -> int; unnamed inputs keep their value), then wait `cycles`
    rising clock edges (combinational designs: `cycles` settle delays of 1 ns)."""

    values: dict[str, int]
    cycles: int = 1


@dataclass
class Clocking:
    clock: str = "clk"
    reset: str = "rst"
    active_low: bool = False
    asynchronous: bool = False

    @property
    def asserted(self) -> int:
        return 0 if self.active_low else 1


@dataclass
class Design:
    family: str
    module: str
    title: str
    difficulty: str
    files: dict[str, str]  # rtl file name -> text
    ports: list[Port]
    behaviour: str  # markdown, the spec's behaviour section
    scenarios: list[list[Step]]  # reference stimuli (first: the primary), as steps
    clocking: Clocking | None  # None: purely combinational, no clock
    after_reset: str = ""
    params: dict = field(default_factory=dict)  # the generator's choices, recorded

    @property
    def inputs(self) -> list[Port]:
        skip = {self.clocking.clock, self.clocking.reset} if self.clocking else set()
        return [p for p in self.ports if p.direction == "input" and p.name not in skip]


# -- coding style ----------------------------------------------------------------------


@dataclass
class Style:
    """How the RTL is written: SystemVerilog (`logic`, `always_ff`, `always_comb`) or
    Verilog-2001 (`reg`/`wire`, `always @`), case or if chains."""

    sv: bool
    use_case: bool
    clocking: Clocking | None

    @classmethod
    def pick(cls, rng: random.Random, clocked: bool = True) -> Style:
        clocking = None
        if clocked:
            clocking = Clocking(
                clock=rng.choice(["clk", "clk", "clock", "clk_i"]),
                reset=rng.choice(["rst", "rst", "reset", "rst_n", "arst_n"]),
            )
            clocking.active_low = clocking.reset.endswith("_n")
            clocking.asynchronous = clocking.reset == "arst_n" or (
                clocking.active_low and rng.random() < 0.3
            )
        return cls(sv=rng.random() < 0.6, use_case=rng.random() < 0.5, clocking=clocking)

    @property
    def ext(self) -> str:
        return ".sv" if self.sv else ".v"

    def ff(self) -> str:
        c = self.clocking
        edge = f"posedge {c.clock}"
        if c.asynchronous:
            edge += f" or {'negedge' if c.active_low else 'posedge'} {c.reset}"
        return f"{'always_ff' if self.sv else 'always'} @({edge})"

    def comb(self) -> str:
        return "always_comb" if self.sv else "always @*"

    def reset_cond(self) -> str:
        c = self.clocking
        return f"!{c.reset}" if c.active_low else c.reset

    def var(self, width: int, signed: bool = False) -> str:
        """Declaration type of an internal register or variable."""
        kind = "logic" if self.sv else "reg"
        return f"{kind}{' signed' if signed else ''}{rng_width(width)}"

    def wire(self, width: int) -> str:
        return f"{'logic' if self.sv else 'wire'}{rng_width(width)}"

    def header(self, module: str, ports: list[Port], regs: set[str], params: dict | None = None) -> str:
        """ANSI module header; `regs` are the outputs assigned in always blocks."""
        lines = []
        for port in ports:
            if self.sv:
                kind = "logic"
            else:
                kind = "reg" if port.name in regs else "wire"
                if port.direction == "input":
                    kind = "wire"
            signed = " signed" if port.signed else ""
            lines.append(f"    {port.direction:<6} {kind}{signed}{rng_width(port.width)} {port.name}")
        plist = ""
        if params:
            plist = " #(\n" + ",\n".join(f"    parameter {k} = {v}" for k, v in params.items()) + "\n)"
        return f"module {module}{plist} (\n" + ",\n".join(lines) + "\n);\n"


def rng_width(width: int) -> str:
    return f" [{width - 1}:0]" if width > 1 else ""


def lit(width: int, value: int) -> str:
    return f"{width}'d{value}" if value >= 0 else f"-{width}'sd{-value}"


def mask(width: int) -> int:
    return (1 << width) - 1


def pick_name(rng: random.Random, stems: list[str], suffixes=("", "_u", "_core", "_blk", "_unit")) -> str:
    return f"{rng.choice(stems)}{rng.choice(suffixes)}{rng.randrange(10, 99)}"


# -- spec ------------------------------------------------------------------------------


def width_text(port: Port) -> str:
    return f"{port.width} (`[{port.width - 1}:0]`)" if port.width > 1 else "1"


def render_spec(design: Design) -> str:
    lines = [f"# {design.title}", "", "## Interface", "", f"Top-level module `{design.module}`:", ""]
    lines += ["| Port | Direction | Width | Description |", "|------|-----------|-------|-------------|"]
    for port in design.ports:
        desc = port.description + (" (signed)" if port.signed else "")
        lines.append(f"| `{port.name}` | {port.direction} | {width_text(port)} | {desc} |")
    lines.append("")
    c = design.clocking
    if c is None:
        lines += [
            "## Timing",
            "",
            "Purely combinational: there is no clock and no reset. Outputs follow the inputs",
            "after a short settling delay (e.g. `await Timer(1, unit=\"ns\")` after driving them).",
            "",
        ]
    else:
        polarity = "active low" if c.active_low else "active high"
        kind = "asynchronous" if c.asynchronous else "synchronous"
        acts = (
            f"it acts at once while {'low' if c.active_low else 'high'}"
            if c.asynchronous
            else f"it acts on a rising edge while it is {'low' if c.active_low else 'high'}"
        )
        lines += [
            "## Clock and reset",
            "",
            f"One clock, `{c.clock}`; every register updates on its rising edge and inputs are sampled",
            "there, so drive inputs away from the rising edge. "
            f"`{c.reset}` is {kind} and {polarity}: {acts} and has priority over every other input.",
        ]
        if design.after_reset:
            lines.append(f"After reset: {design.after_reset}")
        lines.append("")
    lines += ["## Behaviour", "", design.behaviour.strip(), ""]
    return "\n".join(lines)


# -- stimulus --------------------------------------------------------------------------

STYLES = ("table", "inline", "helper", "falling")


def _value(v: int) -> str:
    return hex(v) if v > 9 else str(v)


def _merge(steps: list[Step]) -> list[Step]:
    """Drop steps that neither drive nor wait."""
    return [s for s in steps if s.values or s.cycles]


def render_stimulus(design: Design, steps: list[Step], style: str, test_name: str = "reference_walk") -> str:
    steps = _merge(steps)
    if design.clocking is None:
        return _render_comb(design, steps, style, test_name)
    return _render_clocked(design, steps, style, test_name)


def _idle(design: Design) -> dict[str, int]:
    return {p.name: 0 for p in design.inputs}


def _render_clocked(design: Design, steps: list[Step], style: str, test_name: str) -> str:
    c = design.clocking
    idle = ", ".join(f"{k}={v}" for k, v in _idle(design).items())
    head = [
        "import cocotb",
        "from cocotb.clock import Clock",
        "from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge",
        "",
        "",
        "async def start(dut, **idle):",
        f'    cocotb.start_soon(Clock(dut.{c.clock}, 10, unit="ns").start())',
        f"    dut.{c.reset}.value = {c.asserted}",
        "    for name, value in idle.items():",
        "        getattr(dut, name).value = value",
        f"    await ClockCycles(dut.{c.clock}, 2)",
        f"    dut.{c.reset}.value = {1 - c.asserted}",
        f"    await RisingEdge(dut.{c.clock})",
        "",
        "",
    ]
    body: list[str] = []
    if style == "table":
        body += ["STEPS = ["]
        for s in steps:
            values = ", ".join(f'"{k}": {_value(v)}' for k, v in s.values.items())
            body.append(f"    ({{{values}}}, {s.cycles}),")
        body += ["]", "", ""]
        body += ["@cocotb.test()", f"async def {test_name}(dut):", f"    await start(dut, {idle})"]
        body += [
            "    for values, cycles in STEPS:",
            "        for name, value in values.items():",
            "            getattr(dut, name).value = value",
            f"        await ClockCycles(dut.{c.clock}, cycles)",
        ]
    elif style == "helper":
        body += [
            "async def drive(dut, cycles=1, **values):",
            "    for name, value in values.items():",
            "        getattr(dut, name).value = value",
            "    if cycles:",
            f"        await ClockCycles(dut.{c.clock}, cycles)",
            "",
            "",
            "@cocotb.test()",
            f"async def {test_name}(dut):",
            f"    await start(dut, {idle})",
        ]
        for s in steps:
            args = [f"{k}={_value(v)}" for k, v in s.values.items()]
            if s.cycles != 1:
                args.insert(0, f"cycles={s.cycles}")
            body.append(f"    await drive(dut{''.join(', ' + a for a in args)})")
    else:  # inline / falling: one statement per drive
        body += ["@cocotb.test()", f"async def {test_name}(dut):", f"    await start(dut, {idle})"]
        for s in steps:
            if style == "falling" and s.values:
                body.append(f"    await FallingEdge(dut.{c.clock})")
            for k, v in s.values.items():
                body.append(f"    dut.{k}.value = {_value(v)}")
            if s.cycles == 1:
                body.append(f"    await RisingEdge(dut.{c.clock})")
            elif s.cycles > 1:
                body.append(f"    await ClockCycles(dut.{c.clock}, {s.cycles})")
    body.append(f"    await ClockCycles(dut.{c.clock}, 2)")
    return "\n".join(head + body) + "\n"


def _render_comb(design: Design, steps: list[Step], style: str, test_name: str) -> str:
    head = ["import cocotb", "from cocotb.triggers import Timer", "", ""]
    idle = _idle(design)
    body: list[str] = []
    if style in ("table", "falling"):
        names = [p.name for p in design.inputs]
        body += [f"VECTORS = [  # {', '.join(names)}"]
        current = dict(idle)
        for s in steps:
            current.update(s.values)
            body.append("    (" + ", ".join(_value(current[n]) for n in names) + ("," if len(names) == 1 else "") + "),")
        body += ["]", "", "", "@cocotb.test()", f"async def {test_name}(dut):"]
        body += [
            "    for vector in VECTORS:",
            f"        for name, value in zip({names!r}, vector):",
            "            getattr(dut, name).value = value",
            '        await Timer(1, unit="ns")',
        ]
    elif style == "helper":
        body += [
            "async def apply(dut, **values):",
            "    for name, value in values.items():",
            "        getattr(dut, name).value = value",
            '    await Timer(1, unit="ns")',
            "",
            "",
            "@cocotb.test()",
            f"async def {test_name}(dut):",
            "    await apply(dut, " + ", ".join(f"{k}={v}" for k, v in idle.items()) + ")",
        ]
        for s in steps:
            body.append("    await apply(dut, " + ", ".join(f"{k}={_value(v)}" for k, v in s.values.items()) + ")")
    else:
        body += ["@cocotb.test()", f"async def {test_name}(dut):"]
        for k, v in idle.items():
            body.append(f"    dut.{k}.value = {v}")
        body.append('    await Timer(1, unit="ns")')
        for s in steps:
            for k, v in s.values.items():
                body.append(f"    dut.{k}.value = {_value(v)}")
            body.append('    await Timer(1, unit="ns")')
    return "\n".join(head + body) + "\n"


def render_trivial(design: Design) -> str:
    """Runs cleanly but only resets and idles: it must miss the target."""
    idle = _idle(design)
    if design.clocking is None:
        lines = ["import cocotb", "from cocotb.triggers import Timer", "", "", "@cocotb.test()", "async def idle_inputs(dut):"]
        lines += [f"    dut.{k}.value = {v}" for k, v in idle.items()]
        lines.append('    await Timer(5, unit="ns")')
        return "\n".join(lines) + "\n"
    steps: list[Step] = [Step({}, 5)]
    return _render_clocked(design, steps, "inline", "reset_and_idle")
