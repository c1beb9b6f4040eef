"""What the design families share: clock and reset ports, a reset block, and the
Design of a generated module."""

from __future__ import annotations

from chorus.synth.design import Design, Port, Step, Style


def clock_ports(style: Style) -> list[Port]:
    c = style.clocking
    polarity = "active low" if c.active_low else "active high"
    return [
        Port(c.clock, "input", 1, "clock"),
        Port(c.reset, "input", 1, f"{'asynchronous' if c.asynchronous else 'synchronous'} reset, {polarity}"),
    ]


def reset_block(style: Style, resets: list[str], body: list[str], indent: str = "  ") -> str:
    """`<ff> begin if (reset) ... else begin body end end`."""
    lines = [f"{indent}{style.ff()} begin", f"{indent}  if ({style.reset_cond()}) begin"]
    lines += [f"{indent}    {r}" for r in resets]
    lines += [f"{indent}  end else begin"]
    lines += [f"{indent}    {b}" for b in body]
    lines += [f"{indent}  end", f"{indent}end"]
    return "\n".join(lines) + "\n"


def make_design(
    fam: str,
    name: str,
    title: str,
    difficulty: str,
    style: Style,
    rtl: str,
    ports: list[Port],
    behaviour: str,
    scenarios: list[list[Step]],
    after_reset: str = "",
    params: dict | None = None,
) -> Design:
    """The Design of module `name`: one RTL file in `style` (its extension and clocking;
    a combinational style has none)."""
    return Design(
        family=fam,
        module=name,
        title=title,
        difficulty=difficulty,
        files={name + style.ext: rtl},
        ports=ports,
        behaviour=behaviour,
        scenarios=scenarios,
        clocking=style.clocking,
        after_reset=after_reset,
        params=params if params is not None else {},
    )
