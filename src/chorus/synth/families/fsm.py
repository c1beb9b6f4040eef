"""State machines: random state graphs with guarded transitions, sequence detectors."""

from __future__ import annotations

import itertools
import random
from collections import deque

from chorus.synth import family, span
from chorus.synth.design import Design, Port, Step, Style, lit, pick_name
from chorus.synth.families.common import clock_ports, make_design

STATE_WORDS = ["IDLE", "ARM", "WAIT", "RUN", "HOLD", "DONE", "FILL", "DRAIN", "SYNC", "LOCK", "PAUSE", "ERR"]
INPUT_WORDS = ["go", "stop", "req", "ack", "mode", "hit", "kick", "flag", "sel"]


def _reset_steps(design_clocking) -> list[Step]:
    c = design_clocking
    return [Step({c.reset: c.asserted}), Step({c.reset: 1 - c.asserted})]


def _guard_text(guard: dict[str, int]) -> str:
    return " && ".join(name if v else f"!{name}" for name, v in guard.items())


def _matches(guard: dict[str, int], combo: dict[str, int]) -> bool:
    return all(combo[k] == v for k, v in guard.items())


Edges = dict[str, list[tuple[dict, str]]]  # state -> its (guard, target) transitions, in priority order


@family("fsm")
def fsm(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    n_states = span(rng, split, (3, 5), (6, 7))
    inputs = rng.sample(INPUT_WORDS, rng.randint(2, 3))
    combos = [dict(zip(inputs, bits)) for bits in itertools.product((0, 1), repeat=len(inputs))]
    states = rng.sample(STATE_WORDS, n_states)
    out_w = rng.randint(2, 4)
    outputs = {s: rng.randrange(1 << out_w) for s in states}
    edges = _state_graph(rng, states, inputs, combos)
    name = pick_name(rng, ["fsm", "ctrl", "sequencer", "controller", "sm"])
    out = rng.choice(["out", "state_out", "code", "status"])
    ports = clock_ports(style) + [Port(i, "input", 1, "control input") for i in inputs]
    ports.append(Port(out, "output", out_w, "Moore output of the current state (table below)"))
    rtl = _fsm_rtl(rng, style, name, ports, out, out_w, states, outputs, edges)
    walks = [_walk(seed, states, edges, inputs, combos, style.clocking) for seed in (1, 2)]
    table = "\n".join(
        ["| state | `" + out + "` | transitions (first matching guard wins; otherwise stay) |", "|---|---|---|"]
        + [
            f"| {s}{' (reset)' if s == states[0] else ''} | {outputs[s]} | "
            + ("; ".join(f"`{_guard_text(g)}` -> {t}" for g, t in edges[s]) or "stay")
            + " |"
            for s in states
        ]
    )
    behaviour = (
        f"A Moore state machine with {n_states} states. On every rising edge after reset it "
        "evaluates the guards of the current state in the order listed and moves to the "
        "state of the first guard that holds; when none holds it stays. "
        f"`{out}` is a combinational function of the current state:\n\n{table}"
    )
    return make_design(
        "fsm", name, f"{n_states}-state controller with guarded transitions", "medium" if n_states <= 4 else "hard",
        style, rtl, ports, behaviour, walks, f"state {states[0]}, `{out}` = {outputs[states[0]]}.",
        {"states": n_states, "inputs": len(inputs), "transitions": sum(map(len, edges.values()))},
    )


def _state_graph(rng: random.Random, states: list[str], inputs: list[str], combos: list[dict]) -> Edges:
    """Random guarded transitions: a spanning tree from the reset state (every state
    reachable), then one or two extra transitions per state, back edges included."""

    def random_guard(taken: list[dict]) -> dict | None:
        for _ in range(30):
            names = rng.sample(inputs, rng.randint(1, min(2, len(inputs))))
            guard = {n: rng.randint(0, 1) for n in names}
            if any(_matches(guard, c) and not any(_matches(g, c) for g in taken) for c in combos):
                return guard
        return None

    edges: Edges = {s: [] for s in states}
    for i in range(1, len(states)):
        parent = states[rng.randrange(i)]
        guard = random_guard([g for g, _ in edges[parent]])
        if guard is None:
            parent = states[i - 1]
            guard = random_guard([g for g, _ in edges[parent]])
        edges[parent].append((guard, states[i]))
    for s in states:
        for _ in range(rng.randint(1, 2)):
            guard = random_guard([g for g, _ in edges[s]])
            target = rng.choice([t for t in states if t != s])
            if guard is not None and target not in [t for _, t in edges[s]]:
                edges[s].append((guard, target))
    return edges


def _next_state(edges: Edges, state: str, combo: dict) -> str:
    return next((t for g, t in edges[state] if _matches(g, combo)), state)


def _fsm_rtl(rng: random.Random, style: Style, name: str, ports: list[Port], out: str, out_w: int,
             states: list[str], outputs: dict[str, int], edges: Edges) -> str:
    """The module: a state register (an enum or localparams, codes maybe shuffled), the
    next state in one or two processes, the Moore output as a chain or a case."""
    n_states = len(states)
    sw = max(1, (n_states - 1).bit_length())
    enc = list(range(n_states))
    if rng.random() < 0.4:
        rng.shuffle(enc)
    code = dict(zip(states, enc))
    rtl = style.header(name, ports, {out})
    if style.sv and rng.random() < 0.5:
        rtl += f"  typedef enum logic [{sw - 1}:0] {{" + ", ".join(f"S_{s} = {lit(sw, code[s])}" for s in states) + "} state_t;\n"
        rtl += "  state_t state, next_state;\n"
    else:
        rtl += "".join(f"  localparam S_{s} = {lit(sw, code[s])};\n" for s in states)
        rtl += f"  {style.var(sw)} state, next_state;\n"
    two_process = rng.random() < 0.6
    # next state as a priority chain of conditional expressions: Verilator 5.48's FSM
    # detection (part of --coverage) aborts on if-chains without else in these blocks
    target_var = "next_state" if two_process else "state"
    assign = "=" if two_process else "<="
    cases = []
    for s in states:
        chain = "".join(f"({_guard_text(g)}) ? S_{t} : " for g, t in edges[s])
        cases.append(f"      S_{s}: {target_var} {assign} {chain}state;")
    if two_process:
        rtl += f"  {style.comb()} begin\n    next_state = state;\n    case (state)\n" + "\n".join(cases) + "\n"
        rtl += "    endcase\n  end\n"  # no default: unused codes cannot occur (an unreachable line)
        rtl += f"  {style.ff()} begin\n    if ({style.reset_cond()}) state <= S_{states[0]};\n    else state <= next_state;\n  end\n"
    else:
        rtl += f"  {style.ff()} begin\n    if ({style.reset_cond()}) state <= S_{states[0]};\n    else begin\n      case (state)\n"
        rtl += "\n".join("  " + line for line in cases) + "\n"
        rtl += "      endcase\n    end\n  end\n"
    if two_process or not style.use_case:
        chain = " :\n".join(f"      (state == S_{s}) ? {lit(out_w, outputs[s])}" for s in states)
        rtl += f"  assign {out} =\n{chain} :\n      {lit(out_w, 0)};\n"
    else:
        rtl += f"  {style.comb()} begin\n    {out} = {lit(out_w, 0)};\n    case (state)\n"
        rtl += "".join(f"      S_{s}: {out} = {lit(out_w, outputs[s])};\n" for s in states)
        rtl += "    endcase\n  end\n"
    return rtl + "endmodule\n"


def _walk(order_seed: int, states: list[str], edges: Edges, inputs: list[str], combos: list[dict],
          clocking) -> list[Step]:
    """Exercise every (state, transition) and every state's hold, by shortest paths."""

    def step(state: str, combo: dict) -> str:
        return _next_state(edges, state, combo)

    todo = []
    for s in states:
        for g, _ in edges[s]:
            todo.append((s, next(cmb for cmb in combos if _matches(g, cmb) and step(s, cmb) == _)))
        hold = [cmb for cmb in combos if step(s, cmb) == s]
        if hold:
            todo.append((s, hold[0]))
    random.Random(order_seed).shuffle(todo)
    steps, current = [], states[0]
    idle = {i: 0 for i in inputs}
    while todo:
        paths = _paths(current, states, combos, step)
        reachable = [t for t in todo if t[0] in paths]
        if not reachable:
            steps += [Step(idle)] + _reset_steps(clocking)
            current = states[0]
            continue
        state, cmb = min(reachable, key=lambda t: len(paths[t[0]]))
        for hop in paths[state]:
            steps.append(Step(dict(hop)))
        steps.append(Step(dict(cmb)))
        current = step(state, cmb)
        todo.remove((state, cmb))
    return steps + [Step(idle, 2)]


def _paths(start, states, combos, step) -> dict:
    """Shortest input sequence from `start` to every reachable state (BFS)."""
    paths = {start: []}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        for cmb in combos:
            t = step(s, cmb)
            if t not in paths:
                paths[t] = paths[s] + [cmb]
                queue.append(t)
    return paths


def _kmp_next(pattern: list[int], k: int, bit: int, overlap: bool) -> tuple[int, bool]:
    """(next matched-prefix length, match) after `bit` with `k` bits matched."""
    seq = pattern[:k] + [bit]
    if seq == pattern:
        if not overlap:
            return 0, True
        seq = seq[1:]
        hit = True
    else:
        hit = False
    for length in range(min(len(seq), len(pattern) - 1), -1, -1):
        if seq[len(seq) - length :] == pattern[:length]:
            return length, hit
    return 0, hit


@family("seq_detect")
def seq_detect(rng: random.Random, split: str) -> Design:
    style = Style.pick(rng)
    length = span(rng, split, (3, 5), (6, 7))
    pattern = [1] + [rng.randint(0, 1) for _ in range(length - 1)]
    overlap = rng.random() < 0.6
    counted = rng.random() < 0.5
    cw = rng.randint(2, 4)
    pat = "".join(map(str, pattern))
    name = pick_name(rng, ["detect", "seqdet", "pattern", "matcher"], ("", f"_{pat}", "_fsm"))
    din, found, count = rng.choice(["din", "bit_in", "serial", "d"]), rng.choice(["found", "match", "detected"]), "count"
    c = style.clocking
    ports = clock_ports(style) + [Port(din, "input", 1, "serial input, one bit per cycle")]
    ports.append(Port(found, "output", 1, "registered one-cycle match pulse"))
    if counted:
        ports.append(Port(count, "output", cw, f"number of matches, saturating at {(1 << cw) - 1}"))
    sw = max(1, (length - 1).bit_length())
    regs = {found} | ({count} if counted else set())
    rtl = style.header(name, ports, regs)
    rtl += f"  {style.var(sw)} state;\n  {style.var(sw)} next_state;\n  {style.var(1)} hit;\n"
    lines = [f"  {style.comb()} begin", "    hit = 1'b0;", "    next_state = state;"]
    hit_var = "hit"
    lines.append("    case (state)")
    for k in range(length):
        lines.append(f"      {lit(sw, k)}: begin")
        for bit in (0, 1):
            nxt, hit = _kmp_next(pattern, k, bit, overlap)
            cond = din if bit else f"!{din}"
            kw = "if" if bit == 0 else "else"
            stmt = f"next_state = {lit(sw, nxt)};" + (f" {hit_var} = 1'b1;" if hit else "")
            lines.append(f"        {kw}{' (' + cond + ')' if bit == 0 else ''} begin {stmt} end")
        lines.append("      end")
    lines += ["    endcase", "  end"]  # no default: next_state = state covers unused codes
    rtl += "\n".join(lines) + "\n"
    resets = [f"state <= {lit(sw, 0)};", f"{found} <= 1'b0;"] + ([f"{count} <= {lit(cw, 0)};"] if counted else [])
    body = ["state <= next_state;", f"{found} <= hit;"]
    if counted:
        body.append(f"if (hit && {count} != {lit(cw, (1 << cw) - 1)}) {count} <= {count} + {lit(cw, 1)};")
    rtl += f"  {style.ff()} begin\n    if ({style.reset_cond()}) begin\n"
    rtl += "".join(f"      {r}\n" for r in resets) + "    end else begin\n"
    rtl += "".join(f"      {b}\n" for b in body) + "    end\n  end\nendmodule\n"

    def walk(reverse: bool) -> list[Step]:
        steps: list[Step] = []
        order = [(k, b) for k in range(length) for b in (0, 1)]
        for k, b in order[::-1] if reverse else order:
            steps += _reset_steps(c) + [Step({din: x}) for x in pattern[:k] + [b]]
        steps += [Step({din: x}) for x in pattern * ((1 << cw) + 1 if counted else 2)]
        return steps + [Step({din: 0}, 3)]

    behaviour = (
        f"Detects the serial pattern {', '.join(map(str, pattern))} (first bit first) on `{din}`, "
        + ("with overlap (the tail of a match can start the next one)" if overlap else "without overlap (after a match, matching starts afresh)")
        + f". `{found}` is high for one cycle after the edge on which the last bit of a match was sampled."
    )
    if counted:
        behaviour += f" `{count}` increments on each match and saturates at {(1 << cw) - 1}."
    return make_design(
        "seq_detect", name, f"{'Overlapping' if overlap else 'Non-overlapping'} {pat} sequence detector", "medium",
        style, rtl, ports, behaviour, [walk(False), walk(True)],
        f"no partial match, `{found}` = 0" + (f", `{count}` = 0." if counted else "."),
        {"pattern": pat, "overlap": overlap, "count_width": cw if counted else 0},
    )
