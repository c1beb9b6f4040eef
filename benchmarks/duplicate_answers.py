"""How many simulations scoring each distinct answer once saves (issue 32's reward wait;
docs/harness.md, "Scoring an answer once").

    python benchmarks/duplicate_answers.py [--simulate-tasks 6 --corpus benchmarks/data/corpus_smollm2_h200.tar.gz]

Counting (every recorded evaluation sample, seconds): the recorded samples of each model
(results/learning_signal_*_samples.jsonl.gz, k answers per task) grouped by the key the
reward uses (harness.score.simulation_key of the extracted stimulus; the task id stands for
the task's fingerprint, which is one per task): distinct answers, duplicate fraction, the
distribution of distinct answers per task, how many copies differ only in prose around the
code (raw text distinct vs key distinct), the chance that sample j repeats one of samples
0..j-1 of its task (what a task's later GRPO visit can take from an earlier call), and
whether copies scored under different seeds ever got different recorded verdicts.

Simulating (`--simulate-tasks N`, minutes: N cold builds): the first N test tasks of the
corpus (one per family first) with duplicated recorded answers of `--model`, scored three
ways on this machine: every sample alone through `harness.score` (as before), one
CoverageReward call (copies share a simulation), and a second call of the same answers
(every verdict reused): rewards, simulations run, simulation seconds, wall.
Writes benchmarks/results/duplicate_answers.json (`--out`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
MODELS = ("sft", "rl_binary", "rl_sft", "rl_rl")  # learning_signal_<model>_{samples,scores}.jsonl.gz


def read_gz_jsonl(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def answer_key(task_id: str, completion: str | None) -> str:
    from chorus.harness.score import simulation_key
    from chorus.prompts import extract_stimulus

    return simulation_key(task_id, extract_stimulus(completion or ""))


def count_duplicates(model: str) -> dict:
    """Duplicate figures of one model's recorded samples (see the module docstring)."""
    samples = read_gz_jsonl(RESULTS / f"learning_signal_{model}_samples.jsonl.gz")
    scores = {(r["task_id"], str(r["sample_id"])): r
              for r in read_gz_jsonl(RESULTS / f"learning_signal_{model}_scores.jsonl.gz")}
    by_task: dict[str, list[dict]] = defaultdict(list)
    for row in sorted(samples, key=lambda r: (r["task_id"], int(r["sample_id"]))):
        by_task[row["task_id"]].append(row)
    keys = {id(r): answer_key(r["task_id"], r["completion"]) for r in samples}
    distinct = len(set(keys.values()))
    raw_distinct = len({(r["task_id"], r["completion"]) for r in samples})
    per_task = Counter(len({keys[id(r)] for r in rows}) for rows in by_task.values())
    repeats: dict[int, list[bool]] = defaultdict(list)
    groups: dict[str, list[dict]] = defaultdict(list)
    for rows in by_task.values():
        for j, row in enumerate(rows):
            repeats[j].append(keys[id(row)] in {keys[id(r)] for r in rows[:j]})
            groups[keys[id(row)]].append(scores[(row["task_id"], str(row["sample_id"]))])
    copies = [g for g in groups.values() if len(g) > 1]
    differing = [g for g in copies if len({(r["status"], r["score"], r["passed"]) for r in g}) > 1]
    return {
        "samples": len(samples),
        "tasks": len(by_task),
        "distinct_answers": distinct,
        "duplicate_fraction": round(1 - distinct / len(samples), 4),
        "raw_text_distinct": raw_distinct,
        "copies_differing_only_in_prose": raw_distinct - distinct,
        "tasks_by_distinct_answers": {str(k): v for k, v in sorted(per_task.items())},
        "p_sample_j_repeats_an_earlier_one": {str(j): round(sum(v) / len(v), 4) for j, v in sorted(repeats.items())
                                              if j > 0},
        "answers_with_copies": len(copies),
        "answers_whose_copies_got_different_recorded_verdicts": len(differing),
    }


def simulate(model: str, corpus: Path, n_tasks: int, workers: int) -> dict:
    """Score duplicated recorded answers of `n_tasks` corpus tasks alone, then through one
    and a second CoverageReward call (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="chorus_dupes_") as work:
        with tarfile.open(corpus) as archive:
            archive.extractall(work, filter="data")
        return simulate_corpus_tasks(model, Path(work), n_tasks, workers)


def simulate_corpus_tasks(model: str, work: Path, n_tasks: int, workers: int) -> dict:
    from chorus.harness import score
    from chorus.harness.score import prebuild
    from chorus.prompts import extract_stimulus
    from chorus.reward import CoverageReward
    from chorus.tasks import load_task

    entries = json.loads((work / "results/smollm2_h200/tasks/manifest.json").read_text())["tasks"]
    tasks = {e["id"]: load_task((REPO if e["source"] == "shipped" else work) / e["dir"]) for e in entries
             if e["split"] == "test"}
    samples = read_gz_jsonl(RESULTS / f"learning_signal_{model}_samples.jsonl.gz")
    by_task: dict[str, list[dict]] = defaultdict(list)
    for row in samples:
        by_task[row["task_id"]].append(row)
    with_copies = [t for t, rows in sorted(by_task.items()) if t in tasks
                   and len({answer_key(t, r["completion"]) for r in rows}) < len(rows)]
    first_of_family: dict[str | None, str] = {}
    for task_id in with_copies:
        first_of_family.setdefault(tasks[task_id].family, task_id)
    chosen = [*first_of_family.values(), *(t for t in with_copies if t not in first_of_family.values())][:n_tasks]
    rows = [r for t in chosen for r in by_task[t]]
    for task_id in chosen:
        prebuild(tasks[task_id])
    start = time.perf_counter()
    alone = [score(tasks[r["task_id"]], extract_stimulus(r["completion"] or "")) for r in rows]
    alone_s = time.perf_counter() - start
    reward = CoverageReward({t: tasks[t] for t in chosen}, "dense", workers=workers)
    try:
        first = reward([r["completion"] for r in rows], task_id=[r["task_id"] for r in rows])
        second = reward([r["completion"] for r in rows], task_id=[r["task_id"] for r in rows])
    finally:
        reward.close()
    calls = [{k: c[k] for k in ("n", "simulated", "duplicates", "reused", "sim_s", "wall_s", "statuses")}
             for c in reward.calls]
    return {
        "model": model,
        "tasks": chosen,
        "answers": len(rows),
        "alone": {"simulations": len(rows), "sim_s": round(sum(r.sim_time_s for r in alone), 3),
                  "wall_s_one_at_a_time": round(alone_s, 3)},
        "reward_calls": calls,
        "rewards_equal_alone": first == [r.score for r in alone],
        "second_call_rewards_equal_first": second == first,
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--simulate-tasks", type=int, default=0, help="tasks simulated for real (0: count only)")
    p.add_argument("--model", default="rl_binary", help="whose answers are simulated")
    p.add_argument("--corpus", type=Path, default=REPO / "benchmarks/data/corpus_smollm2_h200.tar.gz")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=RESULTS / "duplicate_answers.json")
    args = p.parse_args(argv)
    report = {"command": "python benchmarks/duplicate_answers.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "counted": {m: count_duplicates(m) for m in args.models
                          if (RESULTS / f"learning_signal_{m}_samples.jsonl.gz").exists()}}
    if args.simulate_tasks:
        report["simulated"] = simulate(args.model, args.corpus, args.simulate_tasks, args.workers)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
