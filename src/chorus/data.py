"""SFT datasets (docs/data_format.md): TRL's conversational prompt-completion rows.

Row: {"prompt": [system, user], "completion": [assistant], "task_id", "source"} where
source is "reference" (a task's reference stimulus), "format" (a short, well-formed
cocotb module: the task's trivial stimulus, teaching the answer format) or "verified"
(a sample the simulator verified as passing).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from chorus.io import read_jsonl, write_jsonl
from chorus.prompts import build_prompt, extract_stimulus, format_completion
from chorus.tasks import Task


def sft_row(task: Task, stimulus: str, source: str) -> dict:
    return {
        "prompt": build_prompt(task),
        "completion": [{"role": "assistant", "content": format_completion(stimulus)}],
        "task_id": task.id,
        "source": source,
    }


def verified_rows(tasks: list[Task], samples_jsonl: str | Path) -> list[dict]:
    """Rows from a samples file with {task_id, completion, passed}: passing ones only."""
    by_id = {t.id: t for t in tasks}
    return [
        sft_row(by_id[s["task_id"]], extract_stimulus(s["completion"]), "verified")
        for s in read_jsonl(samples_jsonl)
        if s.get("passed") and s["task_id"] in by_id
    ]


def build_stage_dataset(tasks: list[Task], mix: dict, out_path: str | Path) -> list[dict]:
    """One SFT stage's rows from its mix: {format: bool, reference: [difficulties],
    verified: path}."""
    rows = []
    if mix.get("format"):
        rows += [sft_row(t, t.trivial_stimulus.read_text(), "format") for t in tasks if t.trivial_stimulus]
    difficulties = set(mix.get("reference", []))
    rows += [
        sft_row(t, t.reference_stimulus.read_text(), "reference")
        for t in tasks
        if t.difficulty in difficulties and t.reference_stimulus
    ]
    if mix.get("verified"):
        rows += verified_rows(tasks, mix["verified"])
    if not rows:
        raise ValueError(f"SFT data mix {mix} selects no examples from {len(tasks)} tasks")
    write_jsonl(out_path, rows)
    return rows


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
        passing = set(zip(table.loc[table["passed"].astype(bool), "task_id"], table.loc[table["passed"].astype(bool), "sample_id"]))
        kept = 0
        for sample in read_jsonl(generations_path):
            key = (sample["task_id"], sample["sample_id"])
            if key not in passing or sample["task_id"] not in by_id:
                continue
            stimulus = extract_stimulus(sample["completion"])
            if (sample["task_id"], stimulus) in seen:
                continue
            seen.add((sample["task_id"], stimulus))
            rows.append(sft_row(by_id[sample["task_id"]], stimulus, "verified"))
            kept += 1
        per_expert[str(Path(generations_path).parent)] = {"passing_samples": len(passing), "kept": kept}
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
