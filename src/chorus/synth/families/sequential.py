"""Counters, shift registers, timers/prescalers, PWM, debouncers, saturating accumulators."""

from __future__ import annotations

import random

from chorus.synth import family, span
from chorus.synth.design import Design, Port, Step, Style, lit, mask, pick_name
from chorus.synth.families.common import clock_ports, make_design, reset_block


@family("counter")
def counter(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    width = span(rng, split, (3, 8), (9, 12))
    down = rng.random() < 0.35
    has_load = rng.random() < 0.6
    has_en = rng.random() < 0.7
    modulus = rng.randint(3, (1 << width) - 1) if rng.random() < 0.35 else None
    name = pick_name(rng, ["counter", "cnt", "tally", "ctr", "ticker"])
    q, en, load, din, flag = (
        rng.choice(["q", "count", "value", "cnt"]),
        rng.choice(["en", "enable", "inc"]),
        rng.choice(["load", "ld"]),
        rng.choice(["din", "d", "load_value"]),
        rng.choice(["wrap", "tc", "at_end", "terminal"]),
    )
    last = (modulus - 1) if modulus else (0 if down else mask(width))
    first = (modulus - 1 if modulus else mask(width)) if down else 0
    ports = clock_ports(style)
    if has_en:
        ports.append(Port(en, "input", 1, "count enable"))
    if has_load:
        ports += [Port(load, "input", 1, f"load `{din}` (priority over counting)"), Port(din, "input", width, "load value")]
    ports += [
        Port(q, "output", width, "counter value"),
        Port(flag, "output", 1, f"high while `{q}` == {0 if down else last}"),
    ]
    step_expr = f"{q} - {lit(width, 1)}" if down else f"{q} + {lit(width, 1)}"
    edge = 0 if down else last
    wrap_to = (modulus - 1 if modulus else mask(width)) if down else 0
    if modulus:
        count = f"{q} <= ({q} == {lit(width, edge)}) ? {lit(width, wrap_to)} : {step_expr};"
    else:
        count = f"{q} <= {step_expr};"
    body = []
    if has_load:
        body += [f"if ({load}) {q} <= {din};", f"else if ({en if has_en else '1' + chr(39) + 'b1'}) {count}"]
    elif has_en:
        body += [f"if ({en}) {count}"]
    else:
        body += [count]
    rtl = style.header(name, ports, {q})
    rtl += reset_block(style, [f"{q} <= {lit(width, first if down else 0)};"], body)
    rtl += f"  assign {flag} = ({q} == {lit(width, edge)});\nendmodule\n"
    reset_value = first if down else 0
    # walk: count through a wrap from reset, load an alternating pattern and both ends
    steps: list[Step] = []
    drive = {en: 1} if has_en else {}
    period = modulus or (1 << width)
    if has_load:
        for value in (mask(width), 0, 0x5555 & mask(width), 0xAAAA & mask(width), (wrap_to + (1 if down else -1)) % period):
            if modulus and value >= modulus:
                value = modulus - 1
            steps += [Step({load: 1, din: value, **({en: 0} if has_en else {})}), Step({load: 0, **drive}, 3)]
        steps += [Step({load: 0, din: 0, **drive}, period + 2)]
    else:
        steps += [Step(drive, period + 3)]
    if has_en:
        steps += [Step({en: 0}, 3), Step({en: 1}, 2)]
    alt = list(reversed(steps[:-2])) + steps[-2:] if has_load else steps
    mode = "down" if down else "up"
    behaviour = [f"A {width}-bit {mode} counter. On a rising edge after reset:"]
    if has_load:
        behaviour.append(f"`{load}` copies `{din}` into `{q}`; otherwise")
    behaviour.append(
        f"{'while `' + en + '` is high ' if has_en else 'every cycle '}`{q}` {'decrements' if down else 'increments'}"
    )
    if modulus:
        behaviour.append(
            f"modulo {modulus}: from {edge} it wraps to {wrap_to} (values stay in 0..{modulus - 1})."
        )
    else:
        behaviour.append(f"and wraps from {edge} to {wrap_to}.")
    behaviour.append(f"`{flag}` is combinational: high while `{q}` == {edge}.")
    return make_design(
        "counter", name, f"{width}-bit {mode} counter" + (f" modulo {modulus}" if modulus else ""), "easy", style,
        rtl, ports, " ".join(behaviour), [steps, alt], f"`{q}` = {reset_value}.",
        {"width": width, "down": down, "load": has_load, "enable": has_en, "modulus": modulus},
    )


@family("shift_register")
def shift_register(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    width = span(rng, split, (4, 10), (11, 16))
    selectable = rng.random() < 0.4
    left = rng.random() < 0.5
    has_load = rng.random() < 0.5
    name = pick_name(rng, ["shifter", "sreg", "shift", "serdes", "sipo"])
    q, sin, sout, en, dirn, load, din = "q", rng.choice(["sin", "serial_in", "si"]), rng.choice(["sout", "serial_out", "so"]), rng.choice(["en", "shift"]), "dir", "load", "din"
    ports = clock_ports(style) + [Port(en, "input", 1, "shift enable"), Port(sin, "input", 1, "serial input")]
    if selectable:
        ports.append(Port(dirn, "input", 1, "shift direction: 1 = left (towards the MSB), 0 = right"))
    if has_load:
        ports += [Port(load, "input", 1, "parallel load (priority over shifting)"), Port(din, "input", width, "parallel data")]
    ports += [Port(q, "output", width, "register contents"), Port(sout, "output", 1, "bit shifted out next")]
    shl = f"{q} <= {{{q}[{width - 2}:0], {sin}}};"
    shr = f"{q} <= {{{sin}, {q}[{width - 1}:1]}};"
    body = []
    if has_load:
        body.append(f"if ({load}) {q} <= {din};")
        prefix = "else "
    else:
        prefix = ""
    if selectable:
        if style.use_case:
            body.append(f"{prefix}if ({en}) begin")
            body += ["  case (dir)", f"    1'b1: {shl}", f"    default: {shr}", "  endcase", "end"]
        else:
            body += [f"{prefix}if ({en} && {dirn}) {shl}", f"else if ({en}) {shr}"]
    else:
        body.append(f"{prefix}if ({en}) {shl if left else shr}")
    rtl = style.header(name, ports, {q}) + reset_block(style, [f"{q} <= {lit(width, 0)};"], body)
    out = (f"{dirn} ? {q}[{width - 1}] : {q}[0]" if selectable else (f"{q}[{width - 1}]" if left else f"{q}[0]"))
    rtl += f"  assign {sout} = {out};\nendmodule\n"
    rand = random.Random(rng.random())
    bits = [rand.randint(0, 1) for _ in range(width)] + [1] * width + [0] * width
    steps = []
    directions = [1, 0] if selectable else [None]
    for d in directions:
        for b in bits:
            values = {en: 1, sin: b}
            if d is not None:
                values[dirn] = d
            steps.append(Step(values))
    steps.append(Step({en: 0, sin: 1}, 2))
    if has_load:
        steps += [Step({load: 1, din: mask(width)}), Step({load: 0}, 1), Step({load: 1, din: 0}), Step({load: 0}, 1)]
    alt = steps[::-1] if not has_load else steps[-4:] + steps[:-4]
    kind = "selectable-direction" if selectable else ("left" if left else "right")
    behaviour = f"A {width}-bit {kind} shift register. On a rising edge after reset: "
    if has_load:
        behaviour += f"`{load}` copies `{din}` into `{q}`; otherwise "
    behaviour += f"while `{en}` is high the register shifts by one, `{sin}` entering at the "
    if selectable:
        behaviour += f"LSB when `{dirn}` = 1 (shift left) and at the MSB when `{dirn}` = 0 (shift right)."
        behaviour += f" `{sout}` is combinational: `{q}`'s MSB when `{dirn}` = 1, its LSB otherwise."
    else:
        behaviour += f"{'LSB (shift left)' if left else 'MSB (shift right)'}. `{sout}` is combinational: the {'MSB' if left else 'LSB'} of `{q}`."
    return make_design(
        "shift_register", name, f"{width}-bit {kind} shift register", "easy", style, rtl, ports, behaviour,
        [steps, alt], f"`{q}` = 0.", {"width": width, "selectable": selectable, "left": left, "load": has_load},
    )
