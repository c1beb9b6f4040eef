"""Issue 29's measure: Pass@1 of one model after coverage-closure rounds 1..N on the fixed
evaluation set (learning_signal's: the corpus's synthetic test split + the shipped test
tasks), under learning_signal's evaluation protocol, with the cost of each round.

Round 1 samples k completions per task (chorus.generate.sample_completions) and scores
them (chorus.harness.score.score_generations, each row with the harness's feedback,
chorus.harness.feedback); round r >= 2 samples again every sample no earlier round
passed, its conversation continued with its answers and their feedback
(chorus.rounds.next_conversations), and scores those. A sample passes when any round up
to r passes (docs/rounds.md). Pass@1 after each round comes with its bootstrap interval
over tasks (chorus.report.round_table). Each round's generation and scoring resume from
their journals under --work; a finished round (round<r>.json there) is read back.

  PYTHONPATH=src USE_HUB_KERNELS=0 python3 benchmarks/feedback_rounds.py --model /root/ls/sft_model \\
      --tasks results/smollm2_h200/tasks/manifest.json --work /root/fr --rounds 3
  PYTHONPATH=src python benchmarks/feedback_rounds.py --smoke --work /tmp/fr --out /tmp/fr.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections import Counter
from pathlib import Path


from chorus.generate import sample_completions
from chorus.harness.feedback import feedback_field
from chorus.harness.score import score_generations
from chorus.io import atomic_write_json, read_jsonl
from chorus.prompts import extract_answer
from chorus.report import per_sample_table, round_table
from chorus.rounds import attempts, merged_rows, next_conversations, round_seed
from chorus.settings import Sampling
from chorus.tasks import load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_signal import EVAL_PROTOCOL, limits, task_sets  # noqa: E402  (benchmarks/ is scripts)
from sft_synth_pass1 import base_model, timed, versions  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="/root/ls/sft_model", help="the evaluated model folder (HF format)")
    p.add_argument("--tasks", type=Path, default=None, help="task manifest of the corpus (the fixed evaluation)")
    p.add_argument("--work", type=Path, default=Path("/root/fr"))
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "feedback_rounds.json")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--k", type=int, default=EVAL_PROTOCOL["k"], help="samples per task in round 1")
    p.add_argument("--smoke", action="store_true", help="a tiny model on one shipped test task, on CPU")
    p.add_argument("--workers", type=int, default=14, help="parallel simulations")
    p.add_argument("--sim-timeout", type=float, default=30.0)
    p.add_argument("--gen-batch-size", type=int, default=512)
    p.add_argument("--bootstrap", type=int, default=2000)
    args = p.parse_args(argv)
    args.command = "python benchmarks/feedback_rounds.py " + " ".join(sys.argv[1:] if argv is None else argv)
    args.protocol = {**EVAL_PROTOCOL, "k": args.k}
    if args.smoke:
        args.workers, args.gen_batch_size, args.bootstrap = 2, 8, 100
        args.protocol.update(k=min(args.k, 2), max_new_tokens=24)
    return args


def evaluation_tasks(args) -> list:
    """learning_signal's evaluation set; --smoke: one shipped test task."""
    return load_tasks(splits="test")[:1] if args.smoke else task_sets(args)[1]


def run_round(args, model: Path, tasks: list, number: int, earlier: list) -> tuple[list, list, dict]:
    """One round's (generation rows, score rows, cost): round 1 samples k per task, a
    later round one per sample no earlier round passed."""
    protocol, timings = args.protocol, {}
    conversations = None if number == 1 else next_conversations({t.id: t for t in tasks}, attempts(earlier))
    generations = args.work / f"gen_r{number}.jsonl"
    stats = timed(timings, "generate_s", lambda: sample_completions(
        model, tasks, protocol["k"], generations,
        Sampling(temperature=protocol["temperature"], top_p=protocol["top_p"],
                 max_new_tokens=protocol["max_new_tokens"], sampler="auto", batch_size=args.gen_batch_size),
        seed=round_seed(0, number), device="cpu" if args.smoke else None, conversations=conversations))
    rows = read_jsonl(generations)
    sandbox, timeouts = limits(args)
    scores = timed(timings, "score_s", lambda: score_generations(
        rows, {t.id: t for t in tasks}, args.work / f"scores_r{number}.jsonl", workers=args.workers,
        limits=sandbox, timeouts=timeouts, extract=extract_answer, annotate=feedback_field))
    cost = {"samples": len(rows), "new_tokens": stats.get("new_tokens"), "tokens_per_s": stats.get("tokens_per_s"),
            "statuses": dict(Counter(r["status"] for r in scores)), **timings}
    return rows, scores, cost


def pass1_by_round(args, rounds: list) -> list[dict]:
    """Pass@1 after each round with its bootstrap interval, and the mean coverage."""
    table = per_sample_table(merged_rows(attempts(rounds), len(rounds)), model="model")
    curve = round_table(table, {"resamples": args.bootstrap})
    return [{"round": int(row["round"]), "pass1": row["pass@1"], "ci95": [row["pass@1_lo"], row["pass@1_hi"]],
             "mean_coverage": row["mean_coverage"], "tasks": int(row["tasks"])} for _, row in curve.iterrows()]


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.work.mkdir(parents=True, exist_ok=True)
    model, tasks = base_model(args), evaluation_tasks(args)
    rounds, costs = [], []
    for number in range(1, args.rounds + 1):
        marker = args.work / f"round{number}.json"  # a finished round: read back, not sampled again
        if marker.exists():
            rows = read_jsonl(args.work / f"gen_r{number}.jsonl")
            scores = read_jsonl(args.work / f"scores_r{number}.jsonl")
            cost = json.loads(marker.read_text())
        else:
            rows, scores, cost = run_round(args, model, tasks, number, rounds)
            atomic_write_json(marker, cost)
        rounds.append((rows, scores))
        costs.append({"round": number, **cost})
    by_round = {row["round"]: row for row in pass1_by_round(args, rounds)}
    report = {
        "benchmark": "feedback_rounds", "command": args.command, "device": versions().get("device"),
        "versions": versions(), "model": str(args.model), "tasks": len(tasks), "k": args.protocol["k"],
        "protocol": args.protocol, "rounds": args.rounds, "rule": "a sample passes when any round up to r passes",
        "pass1_by_round": [{**by_round[c["round"]], "cost": c} for c in costs],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, report)
    print(json.dumps({r["round"]: [round(r["pass1"], 4), r["ci95"]] for r in report["pass1_by_round"]}), flush=True)
    return report


if __name__ == "__main__":
    main()
