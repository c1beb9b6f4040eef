"""Coverage-closure rounds of an evaluation (eval.rounds, docs/rounds.md): a sample that
has not passed gets its answers and the harness's feedback on each (score rows carry
`feedback`, chorus.harness.feedback) as chat turns and answers again. A sample passes
when any of its rounds passes (CVDP's agentic rule), so a passing sample is not drawn
again. Round 1 is the usual generation and scoring; round r >= 2 draws one completion
per sample that failed rounds 1..r-1 (generate_round) and scores it like round 1.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

from chorus.prompts import round_prompt
from chorus.tasks import Task

Key = tuple[str, str]  # (task id, sample id as text): 1 and "1" are one sample


@dataclass
class Attempt:
    """One round of one sample: the model's answer and its score row."""

    completion: str
    score: dict


def sample_key(row: dict) -> Key:
    return str(row["task_id"]), str(row["sample_id"])


def round_seed(seed: int, round_number: int) -> int:
    """The sampling seed of a round: round 1 keeps `seed` (today's evaluation), later
    rounds draw afresh."""
    return seed if round_number == 1 else zlib.crc32(f"{seed}/round{round_number}".encode())


def attempts(rounds: list[tuple[list[dict], list[dict]]]) -> dict[Key, list[Attempt]]:
    """Each sample's attempts in round order, from every finished round's (generation
    rows, score rows). The samples are round 1's; a later round holds only the samples
    that had not passed."""
    history: dict[Key, list[Attempt]] = {}
    for number, (generations, scores) in enumerate(rounds, start=1):
        by_key = {sample_key(row): row for row in scores}
        for row in generations:
            key = sample_key(row)
            if key not in by_key:
                raise ValueError(f"round {number}: no score for sample {key}")
            if number > 1 and (key not in history or len(history[key]) != number - 1):
                raise ValueError(f"round {number}: sample {key} was not in round {number - 1}")
            history.setdefault(key, []).append(Attempt(row["completion"] or "", by_key[key]))
    return history


def passed(attempts_of_sample: list[Attempt]) -> bool:
    return any(attempt.score["passed"] for attempt in attempts_of_sample)


def next_conversations(tasks: dict[str, Task], history: dict[Key, list[Attempt]]) -> dict[tuple[str, int], list]:
    """(task id, sample id) -> the next round's prompt of every sample no round has
    passed yet: its task's prompt, then each answer and the feedback on it."""
    conversations = {}
    for (task_id, sample_id), tries in history.items():
        if passed(tries):
            continue
        if any("feedback" not in attempt.score for attempt in tries):
            raise ValueError(f"sample {task_id}/{sample_id}: a score row without feedback "
                             "(the scoring job ran without eval.rounds > 1)")
        turns = [(attempt.completion, attempt.score["feedback"]) for attempt in tries]
        conversations[(task_id, int(sample_id))] = round_prompt(tasks[task_id], turns)
    return conversations


def merged_rows(history: dict[Key, list[Attempt]], rounds: int) -> list[dict]:
    """One per-sample row after `rounds` rounds: the verdict, score and coverage of its
    last attempt, `passed` when any attempt passed, `rounds_used`, and per round r the
    state after round r (`passed_r<r>`, `score_r<r>`: the last attempt up to r), so the
    round-1 columns are the one-round evaluation. The feedback text is left out."""
    rows = []
    for tries in history.values():
        last = tries[-1].score
        row = {key: value for key, value in last.items() if key != "feedback"}
        row.update(passed=passed(tries), rounds_used=len(tries))
        for number in range(1, rounds + 1):
            upto = tries[:number]
            row[f"passed_r{number}"] = passed(upto)
            row[f"score_r{number}"] = upto[-1].score["score"]
        rows.append(row)
    return rows


def read_rounds(generation_files: list[str], score_files: list[str]) -> list[tuple[list[dict], list[dict]]]:
    """(generation rows, score rows) of each round, in the order of `generation_files`
    (one per round, `<round folder>/generations.jsonl`); each score shard
    (`<round folder>/scores/shard<i>.jsonl`) goes to the round of its folder."""
    from chorus.io import read_jsonl

    folders = [Path(path).parent for path in generation_files]
    scores: dict[Path, list[dict]] = {folder: [] for folder in folders}
    for path in score_files:
        scores[Path(path).parent.parent].extend(read_jsonl(path))
    return [(read_jsonl(path), scores[folder]) for path, folder in zip(generation_files, folders)]


def check_scored(generations: list[dict], scores: list[dict], where: str = "") -> None:
    """Raises RuntimeError unless `scores` holds exactly one row per generation row."""
    scored, expected = {sample_key(r) for r in scores}, {sample_key(g) for g in generations}
    if scored != expected or len(scores) != len(generations):
        raise RuntimeError(
            f"{where}{len(scores)} results for {len(generations)} generations: "
            f"missing {sorted(expected - scored)[:5]}, unexpected {sorted(scored - expected)[:5]}"
        )


def round_dir(pool_dir: str | Path, round_number: int) -> Path:
    """Where round `round_number` of a pool's model keeps its generations and score
    shards: the pool folder itself for round 1 (the one-round layout), round<r>/ after."""
    return Path(pool_dir) if round_number == 1 else Path(pool_dir) / f"round{round_number}"
