"""Repair conversations for SFT (docs/rounds.md, "Repair rows"): a model trained on
one-turn answers only does not know what to do with a round's feedback. A repair row
shows it: the task's prompt, a weak answer, the harness's feedback on that answer (the
text a round shows, chorus.harness.feedback.feedback_field, from a real simulation of
that answer and nothing else) and then a verified passing program, the only turn
trained on (completion-only loss).

Weak answers are the design's program (chorus.synth.program) at the verified program's
budget with one deliberate mistake, the ones evaluated models make: an input port left
out of INPUTS (its bits, and what they drive, never toggle), a width copied too wide
(the simulator refuses the value: a runtime error) or too narrow (the upper bits never
toggle), or a run too short for wide counters and without the reset in the middle of
activity. A program of the "dut" style (chorus.synth.program) reads its widths from the
design, so it has no width to get wrong: its weak answers are the port left out and the
short run. Callers may add other failing programs of the design (the verify phase's
below-target budgets). Only answers whose simulation failed by the answer's own fault
become rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from itertools import zip_longest

from chorus.data import sft_row
from chorus.prompts import format_completion, render_prompt
from chorus.synth.design import Design, Port
from chorus.synth.program import Budget, render_program
from chorus.tasks import Task

# shorter than any drawn budget (BUDGET_CHOICES): a wide counter does not wrap, a slow
# design does not settle, and two phases leave out the reset in the middle of activity
SHORT_RUN = Budget(phases=2, cycles_per_phase=25, max_hold=1)
NOT_THE_ANSWERS_FAULT = ("build_error", "sandbox_error")


def _leave_out_widest(inputs: list[Port]) -> dict[str, int | None]:
    return {max(inputs, key=lambda p: p.width).name: None}


def _widen_narrowest(inputs: list[Port]) -> dict[str, int | None]:
    narrowest = min(inputs, key=lambda p: p.width)
    return {narrowest.name: narrowest.width + 1}


def _halve_widest(inputs: list[Port]) -> dict[str, int | None]:
    widest = max(inputs, key=lambda p: p.width)
    return {widest.name: widest.width // 2} if widest.width > 1 else {}


# weakness -> the inputs it changes: port name -> its width in INPUTS (None: left out)
PORT_WEAKNESSES = {"port_left_out": _leave_out_widest, "width_too_wide": _widen_narrowest,
                   "width_too_narrow": _halve_widest}
WEAKNESSES = (*PORT_WEAKNESSES, "short_run")
# the weaknesses a program of each style (chorus.synth.program.PROGRAM_STYLES) can have:
# the "dut" style writes no widths; an output listed among its inputs is no weakness
# either (it is driven, the run goes on, and the score replays inputs only: one design
# of every family simulated with its widest output listed passed as without it)
STYLE_WEAKNESSES = {"table": WEAKNESSES, "dut": ("port_left_out", "short_run")}


def weakened_program(design: Design, budget: Budget, weakness: str, style: str = "table") -> str | None:
    """`design`'s program at `budget` in `style` with `weakness` (WEAKNESSES); None where
    it cannot have it (no inputs, no input wider than a bit, `budget` already SHORT_RUN,
    a weakness the style does not have)."""
    if weakness not in STYLE_WEAKNESSES[style]:
        return None
    if weakness == "short_run":
        return None if budget == SHORT_RUN else render_program(design, SHORT_RUN, style=style)
    if not design.inputs:
        return None
    changes = PORT_WEAKNESSES[weakness](design.inputs)
    if not changes:
        return None
    ports = [p if p.name not in changes else replace(p, width=changes[p.name])
             for p in design.ports if not (p.name in changes and changes[p.name] is None)]
    return render_program(replace(design, ports=ports), budget, style=style)


def weak_answers(designs: dict[str, tuple[Design, Budget]], failed: list[dict] = (),
                 style: str = "table") -> list[dict]:
    """Generation rows {task_id, sample_id, completion, weakness} of the weakened programs
    (in `style`) of each task's (design, verified program's budget), plus the `failed`
    rows (other failing programs: `weakness` "verify_budget"). Interleaved over tasks,
    each task's weaknesses in a rotated order, so a prefix spreads over designs and
    weaknesses."""
    weaknesses = STYLE_WEAKNESSES[style]
    per_task: dict[str, list[dict]] = {}
    for index, (task_id, (design, budget)) in enumerate(designs.items()):
        order = weaknesses[index % len(weaknesses):] + weaknesses[:index % len(weaknesses)]
        programs = [(w, weakened_program(design, budget, w, style)) for w in order]
        per_task[task_id] = [{"task_id": task_id, "completion": format_completion(p), "weakness": w}
                             for w, p in programs if p is not None]
    for row in failed:
        per_task.setdefault(row["task_id"], []).append(
            {"task_id": row["task_id"], "completion": row["completion"], "weakness": "verify_budget"})
    for rows in per_task.values():
        for sample_id, row in enumerate(rows):
            row["sample_id"] = sample_id
    return [row for group in zip_longest(*per_task.values()) for row in group if row is not None]


def repair_rows(weak: list[dict], scores: list[dict], tasks: dict[str, Task], finals: dict[str, str],
                count: int, fits: Callable[[dict], bool] = lambda row: True) -> tuple[list[dict], dict]:
    """Up to `count` repair rows (source "repair"), in the order of `weak`: for each weak
    answer whose score row (with `feedback`) failed by the answer's fault, the task's
    prompt, that answer, its feedback, then `finals[task_id]` (a verified program); a
    row `fits` rejects (too long to train on whole) is left out. Also returns counts:
    rows by weakness, the weak answers' statuses, rows left out as too long."""
    by_key = {(s["task_id"], str(s["sample_id"])): s for s in scores}
    rows, used, too_long = [], Counter(), 0
    for answer in weak:
        score = by_key.get((answer["task_id"], str(answer["sample_id"])))
        if len(rows) == count:
            break
        if score is None or score["passed"] or score["status"] in NOT_THE_ANSWERS_FAULT:
            continue
        task = tasks[answer["task_id"]]
        row = sft_row(task, finals[task.id], "repair", [(answer["completion"], score["feedback"])])
        if not fits(row):
            too_long += 1
            continue
        rows.append(row)
        used[answer["weakness"]] += 1
    statuses = Counter(s["status"] for s in scores)
    return rows, {"weak_answers": len(weak), "rows": len(rows), "rows_by_weakness": dict(used),
                  "weak_statuses": dict(statuses), "left_out_too_long": too_long}


def row_tokens(tokenizer, row: dict) -> int:
    """Tokens of an SFT row as the trainer renders it (chat template, prompt + completion)."""
    text = render_prompt(tokenizer, row["prompt"] + row["completion"], add_generation_prompt=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])
