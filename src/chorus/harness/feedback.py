"""The feedback of a coverage-closure round: what the harness measured of one candidate,
as a short text the model reads before it answers again (docs/harness.md, "Feedback").

It is built only from the candidate's own verdict (`SimResult`) and the coverage that
was scored, Run 2's replay (`SimResult.coverage_dat`, written by our code alone), with
the names and source lines of the task's own design: the verdict, the head and tail of
an error, each metric against its target, the uncovered lines and branches, the signal
bits that did not toggle both ways. Nothing of the reference stimulus, of the build or
of another task enters it. For a black-box task (`show_rtl: false`) no source line is
quoted. Error text comes from the candidate's run, so the candidate controls it: it is
bounded, stripped of control characters and backticks, and every line of it is quoted
(`| `) inside a fenced block, so it cannot pose as a harness section. The whole text is
at most `MAX_FEEDBACK_CHARS`.
"""

from __future__ import annotations

import re

from chorus.harness.coverage import PAGE_TO_METRIC, uncovered_points
from chorus.harness.verdict import SCORED_STATUSES, SimResult
from chorus.tasks import Task

MAX_FEEDBACK_CHARS = 3000
MAX_ERROR_LINES = 12  # the first half and the last half of a longer error
MAX_LINE_CHARS = 160
MAX_HOLES = 12  # per section: uncovered lines, branches, other points, signals
_TOGGLE = re.compile(r"^(?P<signal>.*?)(?:\[(?P<bit>\d+)\])?:(?P<edge>0->1|1->0)$")
_UNPRINTABLE = re.compile(r"[^\t\x20-\x7e]")
STATUS_TEXT = {
    "ok": "every coverage target is met",
    "below_target": "the simulation ran, but coverage is below the target",
    "syntax_error": "the answer is not valid Python",
    "runtime_error": "the simulation did not end normally",
    "timeout": "the simulation reached its time limit",
    "memory": "the simulation ran out of memory",
    "output_limit": "the stimulus wrote more output or input changes than allowed",
    "no_coverage": "the simulation wrote no coverage",
    "build_error": "the design could not be built (not your answer's fault)",
    "sandbox_error": "the harness failed (not your answer's fault)",
}


def round_feedback(task: Task, result: SimResult, *, max_chars: int = MAX_FEEDBACK_CHARS) -> str:
    """The feedback text of one scored candidate of `task` (at most `max_chars`)."""
    lines = [f"Result: {result.status}: {STATUS_TEXT.get(result.status, result.status)}."]
    if result.status not in SCORED_STATUSES and result.detail.strip():
        lines += ["Error output of your testbench's run (quoted, shortened):", *quoted(result.detail)]
    lines += coverage_lines(task, result)
    if result.status in SCORED_STATUSES and result.coverage_dat:
        lines += hole_lines(task, result.coverage_dat)
    if result.passed:
        lines.append("The targets are met.")
    elif result.status in SCORED_STATUSES:
        lines.append("Add stimulus that reaches the missed coverage; answer with the complete, revised test module.")
    else:
        lines.append("Fix the problem; answer with the complete, revised test module.")
    return bounded("\n".join(lines), max_chars)


def feedback_field(task: Task, result: SimResult) -> dict[str, str]:
    """The `feedback` column of a score row (score_generations' `annotate`)."""
    return {"feedback": round_feedback(task, result)}


def quoted(text: str) -> list[str]:
    """Candidate-controlled text as a fenced block of `| `-prefixed lines: at most
    MAX_ERROR_LINES lines (head and tail) of MAX_LINE_CHARS, no backticks, printable."""
    rows = [_clip(_UNPRINTABLE.sub("?", row).replace("`", "'")) for row in text.strip().splitlines()]
    if len(rows) > MAX_ERROR_LINES:
        half = MAX_ERROR_LINES // 2
        rows = [*rows[:half], f"... ({len(rows) - 2 * half} lines left out) ...", *rows[-half:]]
    return ["```text", *(f"| {row}" for row in rows), "```"]


def coverage_lines(task: Task, result: SimResult) -> list[str]:
    """Each metric's coverage against its target (targeted metrics first)."""
    if not result.coverage:
        return []
    lines = ["Coverage reached (target):"]
    targets = task.coverage_target
    for metric in [*targets, *sorted(set(result.coverage) - set(targets))]:
        value = result.coverage.get(metric, 0.0)
        if metric in targets:
            met = "met" if value + 1e-9 >= targets[metric] else "NOT met"
            lines.append(f"- {metric}: {value:.1%} (target {targets[metric]:.0%}, {met})")
        else:
            lines.append(f"- {metric}: {value:.1%} (not targeted)")
    return lines


def hole_lines(task: Task, coverage_dat: str) -> list[str]:
    """The uncovered points of the scored coverage, by kind, each list bounded."""
    holes = uncovered_points(coverage_dat, task.coverage_exclude)
    sources = {name: text.splitlines() for name, text in task.rtl_text().items()} if task.show_rtl else {}
    by_metric: dict[str, list[dict]] = {}
    for fields in holes:
        by_metric.setdefault(PAGE_TO_METRIC[fields["page"].split("/", 1)[0]], []).append(fields)
    lines = []
    for metric, title in (("line", "Uncovered lines"), ("branch", "Uncovered branches")):
        lines += _section(title, [_located(p, sources) for p in by_metric.get(metric, [])])
    lines += _section("Signals whose bits did not toggle both ways",
                      toggle_holes(task, by_metric.get("toggle", [])))
    for metric in sorted(set(by_metric) - {"line", "branch", "toggle"}):
        lines += _section(f"Uncovered {metric} points", [_located(p, sources) for p in by_metric[metric]])
    return lines


def toggle_holes(task: Task, points: list[dict]) -> list[str]:
    """One line per signal: its bits that never rose (0->1) and that never fell (1->0)."""
    signals: dict[str, dict[str, list[int]]] = {}
    for fields in points:
        match = _TOGGLE.match(fields.get("o", ""))
        if not match:
            continue
        module = fields["page"].split("/", 1)[1] if "/" in fields["page"] else task.toplevel
        name = match["signal"] if module == task.toplevel else f"{module}.{match['signal']}"
        edges = signals.setdefault(name, {"0->1": [], "1->0": []})
        edges[match["edge"]].append(int(match["bit"]) if match["bit"] is not None else -1)
    lines = []
    for name, edges in signals.items():
        parts = [f"{'never rose' if edge == '0->1' else 'never fell'} ({edge}){_bits(bits)}"
                 for edge, bits in edges.items() if bits]
        lines.append(_clip(f"{name}: {'; '.join(parts)}"))
    return lines


def _bits(bits: list[int]) -> str:
    """ ' in bits 0-3, 7' (nothing for a one-bit signal)."""
    bits = sorted(b for b in bits if b >= 0)
    if not bits:
        return ""
    runs, start = [], bits[0]
    for previous, bit in zip(bits, [*bits[1:], None]):
        if bit is None or bit != previous + 1:
            runs.append(str(start) if start == previous else f"{start}-{previous}")
            start = bit
    return f" in bit{'s' if len(bits) > 1 else ''} {', '.join(runs)}"


def _located(fields: dict, sources: dict[str, list[str]]) -> str:
    """`file:lines (kind of line l): first source line` of one point: the lines a point
    spans (`S`) when Verilator gives them, else its own line."""
    name = fields.get("f", "").rsplit("/", 1)[-1]
    line, kind, span = fields.get("l", "?"), fields.get("o", ""), fields.get("S", "") or fields.get("l", "?")
    where = f"{name}:{span}" + (f" ({kind}{'' if span == line else f' of line {line}'})" if kind else "")
    first = span.split("-", 1)[0]
    text = sources.get(name, [])
    number = int(first) if first.isdigit() else 0
    source = text[number - 1].strip() if 0 < number <= len(text) else ""
    return _clip(f"{where}: {source}" if source else where)


def _section(title: str, rows: list[str]) -> list[str]:
    if not rows:
        return []
    shown = rows[:MAX_HOLES]
    more = f" ({len(shown)} of {len(rows)} shown)" if len(rows) > len(shown) else ""
    return [f"{title}{more}:", *(f"- {row}" for row in shown)]


def _clip(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 3] + "..."


def bounded(text: str, max_chars: int) -> str:
    """`text` cut at a line boundary to at most `max_chars`, saying so; a fence left
    open by the cut is closed."""
    if len(text) <= max_chars:
        return text
    note = "\n(feedback shortened)"
    kept = text[: max(0, max_chars - len(note) - 4)].rsplit("\n", 1)[0]
    if kept.count("```") % 2:
        kept += "\n```"
    return (kept + note)[:max_chars]
