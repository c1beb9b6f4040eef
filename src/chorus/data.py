"""SFT datasets (docs/data_format.md): TRL's conversational prompt-completion rows.

Row: {"prompt": [system, user], "completion": [assistant], "task_id", "source"} where
source is "reference" (a task's reference stimulus or one of its verified variants),
"program" (a synthetic task's programmatic reference, chorus.synth.program), "format"
(the task's shortest passing reference: a short, well-formed module that also passes,
teaching the answer format by example), "verified" (a sample the simulator verified
as passing) or "repair" (chorus.repair: the prompt goes on with a weak answer and the
feedback on it). Trivial stimuli never train: they fail by construction.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from chorus.io import read_jsonl, write_jsonl
from chorus.prompts import extract_stimulus, format_completion, round_prompt
from chorus.synth.corpus import design_of
from chorus.synth.program import PROGRAM_FILE, restyle_program
from chorus.tasks import Task


def sft_row(task: Task, stimulus: str, source: str, rounds: list[tuple[str, str]] = ()) -> dict:
    """One row answering `task` with `stimulus`; `rounds`: earlier (answer, feedback)
    turns the prompt carries first (chorus.prompts.round_prompt: a repair conversation)."""
    return {
        "prompt": round_prompt(task, list(rounds)),
        "completion": [{"role": "assistant", "content": format_completion(stimulus)}],
        "task_id": task.id,
        "source": source,
    }


MIX_KEYS = {"reference", "program", "format", "verified", "variants", "families", "sources"}


def program_stimulus(task: Task) -> Path | None:
    """The task's verified programmatic reference (a variant at PROGRAM_FILE), if any."""
    wanted = task.root / PROGRAM_FILE
    return next((p for p in task.reference_variants if p == wanted), None)


def program_text(task: Task, program: Path, style: str) -> str:
    """The verified program of `task` (written in the table style) in `style`
    (chorus.synth.program.PROGRAM_STYLES)."""
    text = program.read_text()
    return text if style == "table" else restyle_program(design_of(task), text, style)


def verified_rows(tasks: list[Task], samples_jsonl: str | Path | list) -> list[dict]:
    """Rows from samples file(s) with {task_id, completion, passed}: passing samples of
    the given tasks only, deduplicated by (task, stimulus text)."""
    paths = [samples_jsonl] if isinstance(samples_jsonl, (str, Path)) else list(samples_jsonl)
    by_id = {t.id: t for t in tasks}
    rows, seen = [], set()
    for path in paths:
        passing = [s for s in read_jsonl(path) if _truthy(s.get("passed"))]
        rows += _new_verified_rows(passing, by_id, seen)
    return rows


def _new_verified_rows(samples, by_id: dict[str, Task], seen: set) -> list[dict]:
    """SFT rows for samples of known tasks whose (task, stimulus text) is not in `seen`
    yet; `seen` is updated, so several sources share one deduplication."""
    rows = []
    for sample in samples:
        if sample.get("task_id") not in by_id:
            continue
        stimulus = extract_stimulus(sample["completion"])
        if (sample["task_id"], stimulus) in seen:
            continue
        seen.add((sample["task_id"], stimulus))
        rows.append(sft_row(by_id[sample["task_id"]], stimulus, "verified"))
    return rows


def _truthy(value) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def select_tasks(tasks: list[Task], mix: dict) -> list[Task]:
    """The tasks a mix draws from: `families: [...]` and `sources: [shipped|synthetic]`
    narrow the given tasks (absent: no narrowing)."""
    families, sources = mix.get("families"), mix.get("sources")
    return [
        t
        for t in tasks
        if (families is None or t.family in families) and (sources is None or t.source in sources)
    ]


def build_stage_dataset(tasks: list[Task], mix: dict, out_path: str | Path) -> list[dict]:
    """One SFT stage's rows from its mix, written to `out_path` (JSONL):
    `format: true` -> every selected task's shortest passing reference (the answer format,
    shown by an example that passes; trivial stimuli never train);
    `reference: [difficulties]` -> reference stimuli of selected tasks of those
    difficulties, with `variants: true` also their verified variants (other styles);
    `program: true` -> every selected task's programmatic reference, or its reference
    when it has none (the shipped tasks);
    `verified: path | [paths]` -> passing samples from {task_id, completion, passed} rows;
    `families: [...]`, `sources: [shipped, synthetic]` -> which tasks the mix draws from.
    Only the tasks given are used: pass train tasks (test tasks never train)."""
    unknown = set(mix) - MIX_KEYS
    if unknown:
        raise ValueError(f"unknown SFT mix key(s) {sorted(unknown)} (known: {sorted(MIX_KEYS)})")
    selected = select_tasks(tasks, mix)
    rows = []
    if mix.get("format"):
        for t in selected:
            if t.references():
                shortest = min((p.read_text() for p in t.references()), key=len)
                rows.append(sft_row(t, shortest, "format"))
    difficulties = mix.get("reference") or []
    difficulties = {difficulties} if isinstance(difficulties, str) else set(difficulties)
    for t in selected:
        if t.difficulty in difficulties:
            paths = t.references() if mix.get("variants") else t.references()[:1]
            rows += [sft_row(t, p.read_text(), "reference") for p in paths]
    if mix.get("program"):
        style = "table" if mix["program"] is True else mix["program"]
        for t in selected:
            program = program_stimulus(t)
            if program is not None:
                rows.append(sft_row(t, program_text(t, program, style), "program"))
            elif t.reference_stimulus:
                rows.append(sft_row(t, t.reference_stimulus.read_text(), "reference"))
    if mix.get("verified"):
        rows += verified_rows(selected, mix["verified"])
    if not rows:
        raise ValueError(f"SFT data mix {mix} selects no examples from {len(tasks)} tasks")
    write_jsonl(out_path, rows)
    return rows


def build_stage(tasks: list[Task], stage: dict, out_path: str | Path) -> list[dict]:
    """Dataset of one configured stage `{name, mix: {...}, epochs, lr, ...}`; the
    training keys are for `chorus.sft.train_stage`."""
    if "mix" not in stage:
        raise ValueError(f"SFT stage {stage.get('name', '?')!r} has no data mix")
    return build_stage_dataset(tasks, stage["mix"], out_path)


def build_consolidation_dataset(
    tasks: list[Task],
    expert_samples: list[tuple[str | Path, str | Path]],
    out_path: str | Path,
    *,
    include_reference: bool = True,
) -> dict:
    """Union of every expert's simulator-verified passing samples (deduplicated by task
    and stimulus text), plus the reference stimuli when asked. Returns statistics."""
    by_id = {t.id: t for t in tasks}
    rows, seen = [], set()
    per_expert = {}
    for generations_path, table_path in expert_samples:
        table = pd.read_csv(table_path)
        passed = table[table["passed"].astype(bool)]
        passing = set(zip(passed["task_id"], passed["sample_id"]))
        samples = [s for s in read_jsonl(generations_path) if (s["task_id"], s["sample_id"]) in passing]
        new_rows = _new_verified_rows(samples, by_id, seen)
        rows += new_rows
        per_expert[str(Path(generations_path).parent)] = {"passing_samples": len(passing), "kept": len(new_rows)}
    verified = len(rows)
    if include_reference:
        rows += [sft_row(t, t.reference_stimulus.read_text(), "reference") for t in tasks if t.reference_stimulus]
    if not rows:
        raise ValueError("no verified samples and include_reference is false: nothing to distil")
    write_jsonl(out_path, rows)
    return {
        "verified_samples": verified,
        "tasks_with_verified": len({r["task_id"] for r in rows if r["source"] == "verified"}),
        "reference_samples": len(rows) - verified,
        "per_expert": per_expert,
    }
