"""ALUs with random operation subsets, muxes, decoders, priority encoders. The
combinational ones have no clock: their stimulus drives inputs and waits with Timer."""

from __future__ import annotations

import random

from chorus.synth import family, span
from chorus.synth.design import Design, Port, Step, Style, lit, mask, pick_name
from chorus.synth.families.common import clock_ports, make_design

# name -> (verilog expression on a, b of width W giving a W+1-bit result, description)
ALU_OPS = {
    "ADD": ("{1'b0, a} + {1'b0, b}", "a + b; carry = carry out"),
    "SUB": ("{1'b0, a} - {1'b0, b}", "a - b; carry = borrow (a < b unsigned)"),
    "AND": ("{1'b0, a & b}", "a & b"),
    "OR": ("{1'b0, a | b}", "a | b"),
    "XOR": ("{1'b0, a ^ b}", "a ^ b"),
    "NOR": ("{1'b0, ~(a | b)}", "~(a | b)"),
    "SHL": ("{a, 1'b0}", "a << 1; carry = a's MSB"),
    "SHR": ("{a[0], 1'b0, a[W-1:1]}", "a >> 1 (logical); carry = a's LSB"),
    "INC": ("{1'b0, a} + 1", "a + 1; carry = carry out"),
    "DEC": ("{1'b0, a} - 1", "a - 1; carry = borrow"),
    "NOTA": ("{1'b0, ~a}", "~a"),
    "PASSB": ("{1'b0, b}", "b"),
    "MAX": ("{1'b0, (a > b) ? a : b}", "the larger of a and b (unsigned)"),
    "MIN": ("{1'b0, (a < b) ? a : b}", "the smaller of a and b (unsigned)"),
    "EQ": ("{1'b0, {(W-1){1'b0}}, a == b}", "1 when a == b, else 0"),
}


@family("alu")
def alu(rng: random.Random, split: str) -> Design:
    registered = rng.random() < 0.5
    style = Style.pick(rng, clocked=registered)
    width = span(rng, split, (4, 8), (10, 16))
    n_ops = rng.randint(4, 8)
    ops = rng.sample(sorted(ALU_OPS), n_ops)
    ow = max(1, (n_ops - 1).bit_length())
    codes = rng.sample(range(1 << ow), n_ops)
    name = pick_name(rng, ["alu", "exec", "arith", "calc"])
    y, zero, carry, op = rng.choice(["y", "result", "res"]), "zero", "carry", rng.choice(["op", "opcode", "fn"])
    ports = (clock_ports(style) + [Port("valid", "input", 1, "when high, the result is registered")]) if registered else []
    ports += [
        Port(op, "input", ow, "operation select (table below)"),
        Port("a", "input", width, "operand a"),
        Port("b", "input", width, "operand b"),
        Port(y, "output", width, ("registered " if registered else "") + "result"),
        Port(zero, "output", 1, "result == 0"),
        Port(carry, "output", 1, "carry / borrow / shifted-out bit (0 for the other operations)"),
    ]
    regs = {y, zero, carry} if registered else set()
    rtl = style.header(name, ports, regs, params={"W": width})
    rtl = rtl.replace(f"[{width - 1}:0] a", "[W-1:0] a").replace(f"[{width - 1}:0] b", "[W-1:0] b")
    rtl += f"  {style.var(width + 1)} r;\n  {style.comb()} begin\n"
    if style.use_case:
        rtl += f"    case ({op})\n"
        for o, code in zip(ops, codes):
            rtl += f"      {lit(ow, code)}: r = {ALU_OPS[o][0]};\n"
        rtl += f"      default: r = {lit(width + 1, 0)};\n    endcase\n"
    else:
        for i, (o, code) in enumerate(zip(ops, codes)):
            rtl += f"    {'if' if i == 0 else 'else if'} ({op} == {lit(ow, code)}) r = {ALU_OPS[o][0]};\n"
        rtl += f"    else r = {lit(width + 1, 0)};\n"
    rtl += "  end\n"
    if registered:
        rtl += f"  {style.ff()} begin\n    if ({style.reset_cond()}) begin\n"
        rtl += f"      {y} <= {lit(width, 0)};\n      {zero} <= 1'b0;\n      {carry} <= 1'b0;\n"
        rtl += f"    end else if (valid) begin\n      {y} <= r[W-1:0];\n      {zero} <= ~|r[W-1:0];\n      {carry} <= r[W];\n    end\n  end\n"
    else:
        rtl += f"  assign {y} = r[W-1:0];\n  assign {zero} = ~|r[W-1:0];\n  assign {carry} = r[W];\n"
    rtl += "endmodule\n"
    m = mask(width)
    pairs = [(0, 0), (m, m), (m, 1), (0x5555 & m, 0xAAAA & m), (0xAAAA & m, 0x5555 & m), (1, m), (3, 3)]
    extra = random.Random(rng.random())

    def walk(shuffle: bool) -> list[Step]:
        order = list(range(1 << ow))
        if shuffle:
            extra.shuffle(order)
        steps = []
        for code in order:
            for a, b in pairs + [(extra.randrange(m + 1), extra.randrange(m + 1))]:
                values = {op: code, "a": a, "b": b}
                if registered:
                    values["valid"] = 1
                steps.append(Step(values))
        if registered:
            steps.append(Step({"valid": 0, "a": 0, "b": 0}, 2))
        return steps

    table = "\n".join(
        ["| op | result |", "|---|---|"]
        + [f"| {code} | {ALU_OPS[o][1].replace('|', chr(92) + '|')} |" for o, code in sorted(zip(ops, codes), key=lambda t: t[1])]
    )
    behaviour = (
        ("On a rising edge with `valid` high the ALU registers the result and flags of `"
         + op + "` applied to `a` and `b`; with `valid` low the outputs hold. ")
        if registered
        else "Purely combinational: the outputs are a function of the inputs. "
    ) + (
        f"Operands and result are {width} bits (parameter `W` = {width}). Other `{op}` values give "
        f"result 0 and carry 0. `{zero}` is high when the {width}-bit result is 0.\n\n{table}"
    )
    return make_design(
        "alu", name, f"{width}-bit {'registered' if registered else 'combinational'} ALU with {n_ops} operations",
        "medium" if n_ops <= 5 else "hard", style, rtl, ports, behaviour, [walk(False), walk(True)],
        f"`{y}`, `{zero}` and `{carry}` are 0." if registered else "",
        {"width": width, "ops": ops, "registered": registered},
    )


@family("mux", combinational=True)
def mux(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng, clocked=False)
    n = span(rng, split, (2, 5), (6, 8))
    width = span(rng, split, (1, 8), (9, 16))
    sw = max(1, (n - 1).bit_length())
    name = pick_name(rng, ["mux", "selector", "pick"])
    ins = [f"in{i}" for i in range(n)]
    sel, y = rng.choice(["sel", "s", "choose"]), rng.choice(["y", "out", "dout"])
    default = rng.choice([0, mask(width)])
    ports = [Port(i, "input", width, f"data input {k}") for k, i in enumerate(ins)]
    ports += [Port(sel, "input", sw, "select"), Port(y, "output", width, "selected input")]
    rtl = style.header(name, ports, {y})
    if style.use_case:
        rtl += f"  {style.comb()} begin\n    case ({sel})\n"
        rtl += "".join(f"      {lit(sw, k)}: {y} = {i};\n" for k, i in enumerate(ins))
        if n < (1 << sw):
            rtl += f"      default: {y} = {lit(width, default)};\n"
        rtl += "    endcase\n  end\n"
    else:
        if not style.sv:
            rtl = rtl.replace(f"output reg", "output wire")
        chain = " :\n".join(f"      ({sel} == {lit(sw, k)}) ? {i}" for k, i in enumerate(ins))
        rtl += f"  assign {y} =\n{chain} :\n      {lit(width, default)};\n"
    rtl += "endmodule\n"
    m = mask(width)
    rand = random.Random(rng.random())

    def walk(order: list[int]) -> list[Step]:
        steps = []
        for k in order:
            for value in (m, 0, rand.randrange(m + 1)):
                others = {i: (~value) & m for i in ins}
                steps.append(Step({sel: k, **others, ins[k] if k < n else ins[0]: value}))
        return steps

    codes = list(range(1 << sw))
    behaviour = f"`{y}` = `in<k>` when `{sel}` = k (k < {n}); other `{sel}` values give {default}. All inputs and `{y}` are {width} bits."
    if n == (1 << sw):
        behaviour = f"`{y}` = `in<k>` when `{sel}` = k. All inputs and `{y}` are {width} bits."
    return make_design(
        "mux", name, f"{n}:1 multiplexer, {width} bits", "easy", style, rtl, ports, behaviour,
        [walk(codes), walk(codes[::-1])], "", {"inputs": n, "width": width},
    )


@family("decoder", combinational=True)
def decoder(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng, clocked=False)
    n = span(rng, split, (2, 3), (4, 4))
    active_low = rng.random() < 0.3
    name = pick_name(rng, ["decoder", "dec", "onehot"])
    a, en, y = rng.choice(["a", "addr", "code"]), rng.choice(["en", "enable"]), rng.choice(["y", "lines", "sel"])
    out_w = 1 << n
    ports = [Port(a, "input", n, "binary input"), Port(en, "input", 1, "enable"), Port(y, "output", out_w, "one-hot output")]
    idle = mask(out_w) if active_low else 0
    rtl = style.header(name, ports, {y})
    rtl += f"  {style.comb()} begin\n    {y} = {lit(out_w, idle)};\n"
    bit = f"{y}[{a}] = 1'b{0 if active_low else 1};"
    if style.use_case:
        rtl += f"    if ({en}) begin\n      case ({a})\n"
        rtl += "".join(
            f"        {lit(n, k)}: {y} = {lit(out_w, (mask(out_w) ^ (1 << k)) if active_low else 1 << k)};\n" for k in range(out_w)
        )
        rtl += "      endcase\n    end\n"
    else:
        rtl += f"    if ({en}) {bit}\n"
    rtl += "  end\nendmodule\n"
    order = list(range(out_w))
    steps = [Step({en: 1, a: k}) for k in order] + [Step({en: 0, a: 0}), Step({en: 1, a: out_w - 1}), Step({en: 0})]
    alt = [Step({en: 1, a: k}) for k in order[::-1]] + [Step({en: 0, a: out_w - 1}), Step({en: 1, a: 0}), Step({en: 0})]
    polarity = "low" if active_low else "high"
    behaviour = (
        f"With `{en}` high, bit `{a}` of `{y}` is {polarity} and every other bit is "
        f"{'high' if active_low else 'low'}; with `{en}` low every bit of `{y}` is {'high' if active_low else 'low'}. "
        "Purely combinational."
    )
    return make_design(
        "decoder", name, f"{n}-to-{out_w} decoder, active-{polarity} outputs", "easy", style, rtl, ports, behaviour,
        [steps, alt], "", {"bits": n, "active_low": active_low},
    )


@family("priority_encoder", combinational=True)
def priority_encoder(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng, clocked=False)
    n = span(rng, split, (3, 8), (9, 12))
    msb_first = rng.random() < 0.5
    ow = max(1, (n - 1).bit_length())
    name = pick_name(rng, ["prio", "penc", "first_one", "lead"])
    req, idx, valid = rng.choice(["req", "bits", "lines_in"]), rng.choice(["idx", "index", "code"]), rng.choice(["valid", "any"])
    ports = [Port(req, "input", n, "request bits"), Port(idx, "output", ow, "index of the winning bit"), Port(valid, "output", 1, "any bit set")]
    rtl = style.header(name, ports, {idx, valid}) + f"  {style.comb()} begin\n    {idx} = {lit(ow, 0)};\n    {valid} = 1'b0;\n"
    order = list(range(n)) if msb_first else list(range(n - 1, -1, -1))
    # the last assignment wins: write the lowest-priority bit first
    for k in order:
        rtl += f"    if ({req}[{k}]) begin {idx} = {lit(ow, k)}; {valid} = 1'b1; end\n"
    rtl += "  end\nendmodule\n"
    winner_first = order[::-1]
    steps = [Step({req: 0})]
    for k in winner_first:
        below = sum(1 << j for j in order[: order.index(k)])
        steps += [Step({req: 1 << k}), Step({req: (1 << k) | below})]
    steps.append(Step({req: mask(n)}))
    alt = [steps[0]] + steps[1:][::-1]
    side = "highest" if msb_first else "lowest"
    behaviour = (
        f"`{valid}` is high when any bit of `{req}` is set; `{idx}` is then the index of the {side}-numbered set bit "
        f"(0 when none is set). Purely combinational."
    )
    return make_design(
        "priority_encoder", name, f"{n}-bit priority encoder ({side} index wins)", "easy", style, rtl, ports,
        behaviour, [steps, alt], "", {"width": n, "msb_first": msb_first},
    )
