"""What the benchmarks that read recorded answers share: the answers and their verdicts
(benchmarks/learning_signal.py's `gen_<model>.jsonl` and `scores_<model>.jsonl`, or the .gz
copies in benchmarks/results/) with the task manifest they answer, and a JSON report
printed and written."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from chorus.tasks import load_manifest


def add_answer_arguments(parser: argparse.ArgumentParser) -> None:
    """samples, scores, --manifest, --root: the recorded answers, their verdicts, their tasks."""
    parser.add_argument("samples", type=Path)
    parser.add_argument("scores", type=Path)
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=Path("."))


def read_rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def recorded_answers(args) -> tuple[dict, dict, list[dict]]:
    """(tasks by id, answer text by (task id, sample id as text), verdict rows) of
    add_answer_arguments' arguments."""
    tasks = {t.id: t for t in load_manifest(args.manifest, None, args.root)}
    answers = {(r["task_id"], str(r["sample_id"])): r["completion"] for r in read_rows(args.samples)}
    return tasks, answers, read_rows(args.scores)


def emit(report: dict, out: Path | None) -> dict:
    """The report printed, and written to `out` when given."""
    text = json.dumps(report, indent=1)
    if out:
        out.write_text(text + "\n")
    print(text)
    return report
