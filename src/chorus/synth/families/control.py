"""Timers/prescalers, PWM, debouncers, saturating accumulators, LFSRs and CRCs with
random polynomials, arbiters, FIFOs, valid/ready pipeline stages, register files."""

from __future__ import annotations

import random

from chorus.synth import family, span
from chorus.synth.design import Design, Port, Step, Style, lit, mask, pick_name
from chorus.synth.families.common import clock_ports, make_design, reset_block


@family("timer")
def timer(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    prescale = span(rng, split, (2, 6), (7, 12))
    width = span(rng, split, (3, 5), (6, 7))
    pw = max(1, (prescale - 1).bit_length())
    name = pick_name(rng, ["timer", "prescaler", "tick_gen", "divider"])
    en, tick, count, done = rng.choice(["en", "run"]), rng.choice(["tick", "strobe"]), "count", rng.choice(["done", "expired", "overflow"])
    ports = clock_ports(style) + [
        Port(en, "input", 1, "run enable"),
        Port(tick, "output", 1, f"one-cycle pulse every {prescale} enabled cycles"),
        Port(count, "output", width, "number of ticks, wrapping"),
        Port(done, "output", 1, f"high while `{count}` is all ones"),
    ]
    rtl = style.header(name, ports, {tick, count}) + f"  {style.var(pw)} pre;\n"
    body = [
        f"{tick} <= 1'b0;",
        f"if ({en}) begin",
        f"  if (pre == {lit(pw, prescale - 1)}) begin",
        f"    pre <= {lit(pw, 0)};",
        f"    {tick} <= 1'b1;",
        f"    {count} <= {count} + {lit(width, 1)};",
        "  end else begin",
        f"    pre <= pre + {lit(pw, 1)};",
        "  end",
        "end",
    ]
    rtl += reset_block(style, [f"pre <= {lit(pw, 0)};", f"{tick} <= 1'b0;", f"{count} <= {lit(width, 0)};"], body)
    rtl += f"  assign {done} = &{count};\nendmodule\n"
    full = prescale * (1 << width) + prescale
    steps = [Step({en: 1}, prescale * 2), Step({en: 0}, 3), Step({en: 1}, full)]
    alt = [Step({en: 1}, full), Step({en: 0}, 2), Step({en: 1}, prescale + 1)]
    behaviour = (
        f"A prescaler counts enabled cycles modulo {prescale}; on the enabled cycle that wraps it, "
        f"`{tick}` is high for the next cycle (registered) and `{count}` ({width} bits) increments, wrapping. "
        f"While `{en}` is low everything holds and `{tick}` is 0. `{done}` is combinational: high while `{count}` is all ones."
    )
    return make_design(
        "timer", name, f"Prescaled tick timer (/{prescale}, {width}-bit tick count)", "easy", style, rtl, ports,
        behaviour, [steps, alt], f"prescaler 0, `{tick}` = 0, `{count}` = 0.", {"prescale": prescale, "width": width},
    )


@family("pwm")
def pwm(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    width = span(rng, split, (3, 5), (6, 7))
    invert = rng.random() < 0.3
    name = pick_name(rng, ["pwm", "pwm_gen", "duty", "dimmer"])
    en, duty, out, period_end = rng.choice(["en", "enable"]), rng.choice(["duty", "level", "compare"]), rng.choice(["pwm_out", "out", "pwm"]), rng.choice(["period_end", "wrap", "cycle_start"])
    ports = clock_ports(style) + [
        Port(en, "input", 1, "run enable"),
        Port(duty, "input", width, "duty value: cycles per period the output is active"),
        Port(out, "output", 1, "PWM output" + (" (active low)" if invert else "")),
        Port(period_end, "output", 1, "high while the period counter is at its last value"),
    ]
    rtl = style.header(name, ports, set()) + f"  {style.var(width)} ctr;\n"
    rtl += reset_block(style, [f"ctr <= {lit(width, 0)};"], [f"if ({en}) ctr <= ctr + {lit(width, 1)};"])
    active = f"({en} && (ctr < {duty}))"
    rtl += f"  assign {out} = {'!' if invert else ''}{active};\n  assign {period_end} = (ctr == {lit(width, mask(width))});\nendmodule\n"
    period = 1 << width
    steps = []
    for d in (0, 1, period // 2, mask(width), 0x55 & mask(width), 0xAA & mask(width)):
        steps.append(Step({en: 1, duty: d}, period))
    steps.append(Step({en: 0, duty: mask(width)}, 3))
    alt = steps[::-1]
    behaviour = (
        f"A {width}-bit period counter increments every cycle while `{en}` is high (period {period} cycles) and holds otherwise. "
        f"`{out}` is combinational: {'low' if invert else 'high'} while `{en}` is high and the counter is below `{duty}`, "
        f"{'high' if invert else 'low'} otherwise. `{period_end}` is high while the counter is {mask(width)}."
    )
    return make_design(
        "pwm", name, f"{width}-bit PWM generator", "easy", style, rtl, ports, behaviour, [steps, alt],
        "period counter 0.", {"width": width, "invert": invert},
    )


@family("debouncer")
def debouncer(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    stable = span(rng, split, (2, 6), (8, 12))
    cw = max(1, stable.bit_length())
    name = pick_name(rng, ["debounce", "debouncer", "filter", "glitch"])
    noisy, clean, rise, fall = rng.choice(["noisy", "btn", "raw"]), rng.choice(["clean", "level", "btn_db"]), "rise", "fall"
    pulses = rng.random() < 0.6
    ports = clock_ports(style) + [Port(noisy, "input", 1, "bouncing input"), Port(clean, "output", 1, "debounced level")]
    if pulses:
        ports += [Port(rise, "output", 1, "one-cycle pulse when the level rises"), Port(fall, "output", 1, "one-cycle pulse when it falls")]
    regs = {clean} | ({rise, fall} if pulses else set())
    rtl = style.header(name, ports, regs) + f"  {style.var(cw)} cnt;\n"
    resets = [f"cnt <= {lit(cw, 0)};", f"{clean} <= 1'b0;"] + ([f"{rise} <= 1'b0;", f"{fall} <= 1'b0;"] if pulses else [])
    body = ([f"{rise} <= 1'b0;", f"{fall} <= 1'b0;"] if pulses else []) + [
        f"if ({noisy} == {clean}) cnt <= {lit(cw, 0)};",
        f"else if (cnt == {lit(cw, stable - 1)}) begin",
        f"  cnt <= {lit(cw, 0)};",
        f"  {clean} <= {noisy};",
    ] + ([f"  {rise} <= {noisy};", f"  {fall} <= !{noisy};"] if pulses else []) + [
        "end else begin",
        f"  cnt <= cnt + {lit(cw, 1)};",
        "end",
    ]
    rtl += reset_block(style, resets, body) + "endmodule\n"
    bounce = [Step({noisy: b}) for b in (1, 0, 1, 1, 0)]
    steps = bounce + [Step({noisy: 1}, stable + 2)] + bounce[::-1] + [Step({noisy: 0}, stable + 2), Step({noisy: 1}, stable + 3), Step({noisy: 0}, stable + 3)]
    alt = [Step({noisy: 1}, stable + 2), Step({noisy: 0}, 1), Step({noisy: 1}, 1), Step({noisy: 0}, stable + 3)] + bounce + [Step({noisy: 0}, stable + 2)]
    behaviour = (
        f"`{clean}` follows `{noisy}` only after `{noisy}` has differed from `{clean}` on {stable} consecutive rising edges; "
        f"any edge on which they agree restarts the count."
    )
    if pulses:
        behaviour += f" `{rise}` / `{fall}` are high for the one cycle after `{clean}` rises / falls."
    return make_design(
        "debouncer", name, f"Input debouncer ({stable} stable cycles)", "easy", style, rtl, ports, behaviour,
        [steps, alt], f"`{clean}` = 0" + (", no pulses." if pulses else "."), {"stable": stable, "pulses": pulses},
    )


@family("saturating_accumulator")
def saturating_accumulator(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    width = span(rng, split, (4, 8), (10, 12))
    iw = max(2, width - rng.randint(1, 3))
    name = pick_name(rng, ["accum", "sat_acc", "integrator", "summer"])
    add, sub, din, acc, sat = "add", "sub", rng.choice(["din", "delta", "x"]), rng.choice(["acc", "total", "sum"]), rng.choice(["sat", "clipped", "limit"])
    ports = clock_ports(style) + [
        Port(add, "input", 1, f"add `{din}` (priority over `{sub}`)"),
        Port(sub, "input", 1, f"subtract `{din}`"),
        Port(din, "input", iw, "operand"),
        Port(acc, "output", width, "accumulator (unsigned, saturating)"),
        Port(sat, "output", 1, "registered: the last operation saturated"),
    ]
    rtl = style.header(name, ports, {acc, sat}) + f"  {style.wire(width + 1)} up, down;\n"
    rtl += f"  assign up = {{1'b0, {acc}}} + {din};\n  assign down = {{1'b0, {acc}}} - {din};\n"
    body = [
        f"{sat} <= 1'b0;",
        f"if ({add}) begin",
        f"  if (up[{width}]) begin {acc} <= {lit(width, mask(width))}; {sat} <= 1'b1; end",
        f"  else {acc} <= up[{width - 1}:0];",
        f"end else if ({sub}) begin",
        f"  if (down[{width}]) begin {acc} <= {lit(width, 0)}; {sat} <= 1'b1; end",
        f"  else {acc} <= down[{width - 1}:0];",
        "end",
    ]
    rtl += reset_block(style, [f"{acc} <= {lit(width, 0)};", f"{sat} <= 1'b0;"], body) + "endmodule\n"
    big = mask(iw)
    n_up = (mask(width) // big) + 2
    steps = [Step({add: 0, sub: 1, din: 1}), Step({sub: 0, add: 1, din: big}, n_up), Step({add: 0, sub: 0}, 2), Step({add: 1, sub: 1, din: 0x55 & big}),
             Step({add: 0, sub: 1, din: big}, n_up), Step({sub: 0, add: 1, din: 0xAA & big}, 2), Step({add: 0}, 2)]
    alt = [Step({add: 1, din: big}, n_up), Step({add: 0, sub: 1, din: big}, n_up), Step({sub: 1, add: 1, din: 0x5A & big}), Step({add: 0, sub: 1, din: 1}, 2), Step({sub: 0}, 2)]
    behaviour = (
        f"On a rising edge after reset: `{add}` adds `{din}` to `{acc}`, otherwise `{sub}` subtracts it; results above "
        f"{mask(width)} clamp to {mask(width)} and below 0 clamp to 0, and `{sat}` is 1 for that cycle's result. "
        f"With neither, `{acc}` holds and `{sat}` is 0."
    )
    return make_design(
        "saturating_accumulator", name, f"{width}-bit saturating accumulator", "medium", style, rtl, ports, behaviour,
        [steps, alt], f"`{acc}` = 0, `{sat}` = 0.", {"width": width, "operand_width": iw},
    )


def _poly(rng: random.Random, width: int) -> int:
    return rng.randrange(1, 1 << width) | 1


@family("lfsr")
def lfsr(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    width = span(rng, split, (4, 8), (10, 16))
    poly = _poly(rng, width) | (1 << (width - 1))
    seed_value = rng.randrange(1, 1 << width)
    name = pick_name(rng, ["lfsr", "prbs", "scrambler", "noise"])
    en, load, seed, q = rng.choice(["en", "step"]), "load", "seed", rng.choice(["q", "state", "lfsr_q"])
    ports = clock_ports(style) + [
        Port(en, "input", 1, "advance"),
        Port(load, "input", 1, f"load `{seed}` (priority)"),
        Port(seed, "input", width, "load value"),
        Port(q, "output", width, "register state"),
    ]
    taps = [i for i in range(width) if poly >> i & 1]
    fb = " ^ ".join(f"{q}[{i}]" for i in taps)
    rtl = style.header(name, ports, {q}) + f"  {style.wire(1)} fb;\n  assign fb = {fb};\n"
    rtl += reset_block(style, [f"{q} <= {lit(width, seed_value)};"], [f"if ({load}) {q} <= {seed};", f"else if ({en}) {q} <= {{{q}[{width - 2}:0], fb}};"])
    rtl += "endmodule\n"
    steps = [Step({en: 1}, 3 * width), Step({en: 0}, 2), Step({load: 1, seed: mask(width)}), Step({load: 0, en: 1}, 2 * width),
             Step({load: 1, seed: 0}), Step({load: 0, en: 1}, 3), Step({load: 1, seed: 0x5A5A & mask(width)}), Step({load: 0, en: 1}, 2 * width)]
    alt = steps[2:] + steps[:2]
    behaviour = (
        f"A {width}-bit Fibonacci LFSR. On a rising edge after reset: `{load}` copies `{seed}` into `{q}`; otherwise while "
        f"`{en}` is high `{q}` shifts left by one and the new LSB is the XOR of bits {', '.join(map(str, taps))} of `{q}` "
        f"(before the shift). A state of 0 stays 0."
    )
    return make_design(
        "lfsr", name, f"{width}-bit LFSR (taps {', '.join(map(str, taps))})", "easy", style, rtl, ports, behaviour,
        [steps, alt], f"`{q}` = {seed_value}.", {"width": width, "poly": poly},
    )


@family("crc")
def crc(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    width = span(rng, split, (4, 8), (10, 16))
    poly = _poly(rng, width)
    init = rng.choice([0, mask(width)])
    name = pick_name(rng, ["crc", "crc_serial", "checksum", "crc_unit"])
    din, valid, clear, crc_q, zero = rng.choice(["din", "bit_in", "data"]), rng.choice(["valid", "en", "shift"]), rng.choice(["clear", "init"]), "crc", "crc_zero"
    ports = clock_ports(style) + [
        Port(valid, "input", 1, "a data bit is present"),
        Port(din, "input", 1, "serial data bit"),
        Port(clear, "input", 1, f"restart: `{crc_q}` := {init} (priority)"),
        Port(crc_q, "output", width, "CRC register"),
        Port(zero, "output", 1, f"high while `{crc_q}` == 0"),
    ]
    rtl = style.header(name, ports, {crc_q}) + f"  {style.wire(1)} fb;\n  assign fb = {crc_q}[{width - 1}] ^ {din};\n"
    rtl += reset_block(
        style,
        [f"{crc_q} <= {lit(width, init)};"],
        [f"if ({clear}) {crc_q} <= {lit(width, init)};", f"else if ({valid}) {crc_q} <= {{{crc_q}[{width - 2}:0], 1'b0}} ^ ({{{width}{{fb}}}} & {lit(width, poly)});"],
    )
    rtl += f"  assign {zero} = ({crc_q} == {lit(width, 0)});\nendmodule\n"
    rand = random.Random(rng.random())
    bits = [rand.randint(0, 1) for _ in range(4 * width)]
    steps = [Step({valid: 1, din: b}) for b in bits] + [Step({valid: 0}, 2), Step({clear: 1}), Step({clear: 0, valid: 1, din: 1}, width), Step({valid: 1, din: 0}, 2 * width), Step({valid: 0}, 2)]
    alt = [Step({valid: 1, din: b}) for b in bits[::-1]] + steps[len(bits):]
    behaviour = (
        f"A serial CRC-{width} (MSB first, polynomial 0x{poly:x} without its x^{width} term, no reflection). On a rising edge "
        f"after reset: `{clear}` sets `{crc_q}` to {init}; otherwise with `{valid}` high, fb = `{crc_q}`[{width - 1}] ^ `{din}` "
        f"and `{crc_q}` := (`{crc_q}` << 1) ^ (fb ? 0x{poly:x} : 0). `{zero}` is combinational."
    )
    return make_design(
        "crc", name, f"Serial CRC-{width} (poly 0x{poly:x})", "medium", style, rtl, ports, behaviour, [steps, alt],
        f"`{crc_q}` = {init}.", {"width": width, "poly": poly, "init": init},
    )


@family("arbiter")
def arbiter(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    n = span(rng, split, (2, 4), (5, 6))
    round_robin = rng.random() < 0.5
    iw = max(1, (n - 1).bit_length())
    name = pick_name(rng, ["arbiter", "arb", "grant_ctl", "rr_arb" if round_robin else "fp_arb"])
    req, gnt = rng.choice(["req", "request"]), rng.choice(["gnt", "grant"])
    ports = clock_ports(style) + [Port(req, "input", n, "request per client"), Port(gnt, "output", n, "registered one-hot grant")]
    rtl = style.header(name, ports, {gnt})
    if round_robin:
        rtl += f"  {style.var(iw)} last;\n  {style.var(n)} pick;\n  {style.var(iw)} pick_idx;\n"
        rtl += f"  integer k;\n  {style.comb()} begin\n    pick = {lit(n, 0)};\n    pick_idx = last;\n"
        # the candidate after `last` wins: scan 2n positions, the first set one (from last+1) wins
        rtl += f"    for (k = {2 * n - 1}; k >= 1; k = k - 1) begin\n"
        rtl += f"      if (k <= {n} && {req}[(last + k) % {n}]) begin\n"
        rtl += f"        pick = {lit(n, 0)};\n        pick[(last + k) % {n}] = 1'b1;\n        pick_idx = (last + k) % {n};\n      end\n    end\n  end\n"
        rtl += reset_block(style, [f"{gnt} <= {lit(n, 0)};", f"last <= {lit(iw, n - 1)};"], [f"{gnt} <= pick;", f"if (|{req}) last <= pick_idx;"])
    else:
        order = list(range(n))
        rng.shuffle(order)
        rtl += f"  {style.var(n)} pick;\n  {style.comb()} begin\n    pick = {lit(n, 0)};\n"
        for i, k in enumerate(order):
            rtl += f"    {'if' if i == 0 else 'else if'} ({req}[{k}]) pick = {lit(n, 1 << k)};\n"
        rtl += "  end\n" + reset_block(style, [f"{gnt} <= {lit(n, 0)};"], [f"{gnt} <= pick;"])
    rtl += "endmodule\n"
    steps = [Step({req: 0})]
    for r in range(1, 1 << n):
        steps.append(Step({req: r}))
    steps += [Step({req: mask(n)}, 2 * n), Step({req: 0}, 2)]
    alt = [steps[0]] + steps[1:-2][::-1] + steps[-2:]
    if round_robin:
        behaviour = (
            f"Round-robin arbiter for {n} clients. On each rising edge after reset, `{gnt}` becomes one-hot for the first "
            f"requesting client after the last granted one (in increasing index order, wrapping), or 0 when nothing is "
            f"requested (the last granted client is then kept). After reset the last granted client is {n - 1}, so client 0 is first."
        )
    else:
        behaviour = (
            f"Fixed-priority arbiter for {n} clients. On each rising edge after reset, `{gnt}` becomes one-hot for the "
            f"requesting client of highest priority (priority order, highest first: {', '.join(map(str, order))}), or 0."
        )
    return make_design(
        "arbiter", name, f"{n}-client {'round-robin' if round_robin else 'fixed-priority'} arbiter", "medium" if round_robin else "easy",
        style, rtl, ports, behaviour, [steps, alt], f"`{gnt}` = 0.", {"clients": n, "round_robin": round_robin},
    )


@family("fifo")
def fifo(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    aw = span(rng, split, (1, 3), (4, 4))
    depth = 1 << aw
    width = span(rng, split, (2, 8), (9, 12))
    name = pick_name(rng, ["fifo", "queue", "buffer", "sync_fifo"])
    wr, rd, din, dout, full, empty, cnt = rng.choice(["wr_en", "push", "wr"]), rng.choice(["rd_en", "pop", "rd"]), "din", "dout", "full", "empty", "count"
    ports = clock_ports(style) + [
        Port(wr, "input", 1, "write `din` (ignored when full)"),
        Port(rd, "input", 1, "read: advance to the next entry (ignored when empty)"),
        Port(din, "input", width, "write data"),
        Port(dout, "output", width, "oldest entry (valid while not empty)"),
        Port(full, "output", 1, f"{depth} entries stored"),
        Port(empty, "output", 1, "no entry stored"),
        Port(cnt, "output", aw + 1, "number of stored entries"),
    ]
    rtl = style.header(name, ports, {cnt})
    rtl += f"  {style.var(width)} mem [0:{depth - 1}];\n  {style.var(aw)} wp, rp;\n  {style.wire(1)} do_wr, do_rd;\n"
    rtl += f"  assign do_wr = {wr} && !{full};\n  assign do_rd = {rd} && !{empty};\n"
    rtl += reset_block(
        style,
        [f"wp <= {lit(aw, 0)};", f"rp <= {lit(aw, 0)};", f"{cnt} <= {lit(aw + 1, 0)};"],
        [
            "if (do_wr) begin",
            f"  mem[wp] <= {din};",
            f"  wp <= wp + {lit(aw, 1)};",
            "end",
            f"if (do_rd) rp <= rp + {lit(aw, 1)};",
            f"if (do_wr && !do_rd) {cnt} <= {cnt} + {lit(aw + 1, 1)};",
            f"else if (do_rd && !do_wr) {cnt} <= {cnt} - {lit(aw + 1, 1)};",
        ],
    )
    rtl += f"  assign {dout} = mem[rp];\n  assign {full} = ({cnt} == {lit(aw + 1, depth)});\n  assign {empty} = ({cnt} == {lit(aw + 1, 0)});\nendmodule\n"
    m = mask(width)
    data = [m, 0, 0x55 & m, 0xAA & m] * depth
    steps = [Step({rd: 1})]  # read while empty: ignored
    steps += [Step({wr: 1, rd: 0, din: data[i]}) for i in range(depth + 1)]  # fill, then write while full
    steps += [Step({wr: 1, rd: 1, din: m})]  # simultaneous when full: read only
    steps += [Step({wr: 0, rd: 1}) for _ in range(depth)]
    steps += [Step({wr: 1, rd: 0, din: 0x33 & m}), Step({wr: 1, rd: 1, din: 0xCC & m}, 2), Step({wr: 0, rd: 1}, depth + 1), Step({rd: 0}, 2)]
    alt = [Step({wr: 1, rd: 0, din: data[i + 1]}) for i in range(depth + 1)] + [Step({wr: 0, rd: 1}) for _ in range(depth + 1)] + steps[-4:] + [Step({wr: 1, rd: 1, din: m}), Step({wr: 0, rd: 0})]
    # the alternative also writes while full and reads while empty (fill depth+1, drain depth+1)
    alt += [Step({wr: 1, rd: 0, din: data[i]}) for i in range(depth)] + [Step({wr: 1, rd: 1, din: 0})] + [Step({wr: 0, rd: 1}, depth + 1), Step({rd: 0}, 2)]
    behaviour = (
        f"A synchronous FIFO of {depth} entries of {width} bits. On a rising edge after reset: `{wr}` stores `{din}` unless "
        f"full; `{rd}` drops the oldest entry unless empty; both may happen on one edge. `{dout}` shows the oldest entry "
        f"(combinational read). `{full}`, `{empty}` and `{cnt}` describe the number of stored entries."
    )
    return make_design(
        "fifo", name, f"Synchronous FIFO, {depth} x {width}", "medium", style, rtl, ports, behaviour, [steps, alt],
        f"empty, `{cnt}` = 0.", {"depth": depth, "width": width},
    )


@family("handshake")
def handshake(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    width = span(rng, split, (2, 8), (9, 16))
    transform = rng.choice(["pass", "invert", "increment"])
    name = pick_name(rng, ["pipe_stage", "reg_slice", "hs_reg", "stage"])
    iv, ir, idata, ov, orr, odata = "in_valid", "in_ready", "in_data", "out_valid", "out_ready", "out_data"
    ports = clock_ports(style) + [
        Port(iv, "input", 1, "upstream offers `in_data`"),
        Port(ir, "output", 1, "this stage can accept"),
        Port(idata, "input", width, "upstream data"),
        Port(ov, "output", 1, "this stage holds a word for downstream"),
        Port(orr, "input", 1, "downstream accepts"),
        Port(odata, "output", width, "the held word"),
    ]
    expr = {"pass": idata, "invert": f"~{idata}", "increment": f"{idata} + {lit(width, 1)}"}[transform]
    rtl = style.header(name, ports, {ov, odata})
    rtl += f"  assign {ir} = !{ov} || {orr};\n"
    rtl += reset_block(
        style,
        [f"{ov} <= 1'b0;", f"{odata} <= {lit(width, 0)};"],
        [f"if ({iv} && {ir}) begin", f"  {ov} <= 1'b1;", f"  {odata} <= {expr};", f"end else if ({orr}) begin", f"  {ov} <= 1'b0;", "end"],
    )
    rtl += "endmodule\n"
    m = mask(width)
    steps = [Step({iv: 1, idata: m, orr: 0}), Step({iv: 1, idata: 0}, 2), Step({orr: 1, iv: 1, idata: 0x55 & m}, 2),
             Step({iv: 0, orr: 1}, 2), Step({iv: 1, idata: 0xAA & m, orr: 1}, 3), Step({iv: 0, orr: 0}), Step({orr: 1}, 2)]
    alt = steps[2:] + steps[:2] + [Step({orr: 1, iv: 0}, 2)]
    what = {"pass": f"`{idata}`", "invert": f"~`{idata}`", "increment": f"`{idata}` + 1 (wrapping)"}[transform]
    behaviour = (
        f"A one-entry valid/ready pipeline stage. `{ir}` = !`{ov}` || `{orr}` (combinational). On a rising edge after reset: "
        f"when `{iv}` and `{ir}` are high the stage takes {what} into `{odata}` and sets `{ov}`; otherwise when `{orr}` is "
        f"high it clears `{ov}` (the word was taken). `{odata}` holds otherwise."
    )
    return make_design(
        "handshake", name, f"Valid/ready pipeline stage ({transform}, {width} bits)", "medium", style, rtl, ports, behaviour,
        [steps, alt], f"`{ov}` = 0, `{odata}` = 0.", {"width": width, "transform": transform},
    )


@family("register_file")
def register_file(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    aw = span(rng, split, (1, 3), (4, 4))
    n = 1 << aw
    width = span(rng, split, (2, 8), (9, 16))
    zero_reg = rng.random() < 0.4
    bypass = rng.random() < 0.4
    name = pick_name(rng, ["regfile", "rf", "regs", "bank"])
    we, wa, wd, ra, rd = "we", "waddr", "wdata", "raddr", "rdata"
    ports = clock_ports(style) + [
        Port(we, "input", 1, "write enable"),
        Port(wa, "input", aw, "write address"),
        Port(wd, "input", width, "write data"),
        Port(ra, "input", aw, "read address"),
        Port(rd, "output", width, "read data (combinational)"),
    ]
    rtl = style.header(name, ports, {rd}) + f"  {style.var(width)} regs [0:{n - 1}];\n  integer i;\n"
    guard = f"{we}{f' && {wa} != {lit(aw, 0)}' if zero_reg else ''}"
    rtl += f"  {style.ff()} begin\n    if ({style.reset_cond()}) begin\n      for (i = 0; i < {n}; i = i + 1) regs[i] <= {lit(width, 0)};\n"
    rtl += f"    end else if ({guard}) begin\n      regs[{wa}] <= {wd};\n    end\n  end\n"
    rtl += f"  {style.comb()} begin\n"
    if zero_reg:
        rtl += f"    if ({ra} == {lit(aw, 0)}) {rd} = {lit(width, 0)};\n    else "
    else:
        rtl += "    "
    if bypass:
        rtl += f"if ({we} && {wa} == {ra}) {rd} = {wd};\n    else {rd} = regs[{ra}];\n"
    else:
        rtl += f"{rd} = regs[{ra}];\n"
    rtl += "  end\nendmodule\n"
    m = mask(width)
    steps = []
    for a in range(n):
        steps.append(Step({we: 1, wa: a, wd: m if a % 2 else 0x55 & m, ra: a}))
    for a in range(n):
        steps.append(Step({we: 0, ra: a}))
    for a in range(n):
        steps.append(Step({we: 1, wa: a, wd: 0xAA & m, ra: (a + 1) % n}))
    steps += [Step({we: 1, wa: 0, wd: m, ra: 0}), Step({we: 0}, 2)]
    alt = steps[n : 2 * n] + steps[:n] + steps[2 * n :] + steps[n : 2 * n]
    behaviour = f"{n} registers of {width} bits. On a rising edge after reset, `{we}` writes `{wd}` to register `{wa}`"
    behaviour += f" (register 0 is read-only and always reads 0)." if zero_reg else "."
    behaviour += f" `{rd}` is combinational: register `{ra}`"
    behaviour += f", or `{wd}` while a write to the same address is pending (write-through bypass)." if bypass else "."
    return make_design(
        "register_file", name, f"{n} x {width} register file", "easy" if not bypass else "medium", style, rtl, ports,
        behaviour, [steps, alt], "every register is 0.", {"regs": n, "width": width, "zero_reg": zero_reg, "bypass": bypass},
    )
