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

--control resample also runs the control arm: round r >= 2 draws every sample no earlier
round of the arm passed afresh from its task's original prompt (no answers, no
feedback; the round's seed, not round 1's), scored and aggregated like the rounds. Its
Pass@1 per round (pass1_by_round_resample) and the paired difference of the rounds to it
(feedback_minus_resample) tell "feedback helps" from "one more draw helps". Round 1 is
shared; the control's later rounds keep their files as gen_r<r>_resample.jsonl etc.

  PYTHONPATH=src USE_HUB_KERNELS=0 python3 benchmarks/feedback_rounds.py --model /root/ls/sft_model \\
      --tasks results/smollm2_h200/tasks/manifest.json --work /root/fr --rounds 3 --control resample
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

import pandas as pd

from chorus.generate import sample_completions
from chorus.harness.feedback import feedback_field
from chorus.harness.score import score_generations
from chorus.io import atomic_write_json, read_jsonl
from chorus.metrics import paired_bootstrap_interval
from chorus.prompts import build_prompt, extract_answer
from chorus.report import per_sample_table, round_table
from chorus.rounds import attempts, merged_rows, next_conversations, passed, round_seed
from chorus.tasks import load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_signal import EVAL_PROTOCOL, limits, protocol_sampling, task_sets  # noqa: E402  (benchmarks/ is scripts)
from sft_synth_pass1 import base_model, timed, versions  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="/root/ls/sft_model", help="the evaluated model folder (HF format)")
    p.add_argument("--tasks", type=Path, default=None, help="task manifest of the corpus (the fixed evaluation)")
    p.add_argument("--work", type=Path, default=Path("/root/fr"))
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "feedback_rounds.json")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--control", choices=["resample"], default=None,
                   help="also run the control arm: later rounds redraw the original prompt, no feedback")
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


def resample_conversations(tasks: dict, history: dict) -> dict[tuple[str, int], list]:
    """The control's next round: every sample no round has passed yet, drawn again from
    its task's original prompt (no answers, no feedback)."""
    return {(task_id, int(sample_id)): build_prompt(tasks[task_id])
            for (task_id, sample_id), tries in history.items() if not passed(tries)}


# arm -> how a later round's prompts are made from the earlier rounds' attempts
ARMS = {"feedback": next_conversations, "resample": resample_conversations}


def round_files(work: Path, number: int, arm: str) -> tuple[Path, Path, Path]:
    """(generations, scores, marker) of round `number` of `arm`; round 1 is every arm's."""
    suffix = "" if number == 1 or arm == "feedback" else f"_{arm}"
    return (work / f"gen_r{number}{suffix}.jsonl", work / f"scores_r{number}{suffix}.jsonl",
            work / f"round{number}{suffix}.json")


def run_round(args, model: Path, tasks: list, number: int, earlier: list, arm: str = "feedback"
              ) -> tuple[list, list, dict]:
    """One round's (generation rows, score rows, cost): round 1 samples k per task, a
    later round one per sample no earlier round passed (prompts as ARMS[arm] makes them)."""
    protocol, timings, seed = args.protocol, {}, round_seed(0, number)
    conversations = None if number == 1 else ARMS[arm]({t.id: t for t in tasks}, attempts(earlier))
    generations, score_file, _ = round_files(args.work, number, arm)
    stats = timed(timings, "generate_s", lambda: sample_completions(
        model, tasks, protocol["k"], generations,
        protocol_sampling(protocol, args.gen_batch_size),
        seed=seed, device="cpu" if args.smoke else None, conversations=conversations))
    rows = read_jsonl(generations)
    sandbox, timeouts = limits(args)
    scores = timed(timings, "score_s", lambda: score_generations(
        rows, {t.id: t for t in tasks}, score_file, workers=args.workers,
        limits=sandbox, timeouts=timeouts, extract=extract_answer, annotate=feedback_field))
    cost = {"samples": len(rows), "seed": seed, "new_tokens": stats.get("new_tokens"),
            "tokens_per_s": stats.get("tokens_per_s"),
            "statuses": dict(Counter(r["status"] for r in scores)), **timings}
    return rows, scores, cost


def run_arm(args, model: Path, tasks: list, arm: str) -> tuple[list, list]:
    """Rounds 1..--rounds of `arm`: each round's (generation rows, score rows) and cost;
    a finished round (its marker) is read back, not sampled again."""
    rounds, costs = [], []
    for number in range(1, args.rounds + 1):
        generations, score_file, marker = round_files(args.work, number, arm)
        if marker.exists():
            rows, scores, cost = read_jsonl(generations), read_jsonl(score_file), json.loads(marker.read_text())
        else:
            rows, scores, cost = run_round(args, model, tasks, number, rounds, arm)
            atomic_write_json(marker, cost)
        rounds.append((rows, scores))
        costs.append({"round": number, **cost})
    return rounds, costs


def samples_by_round(rounds: list) -> pd.DataFrame:
    """The per-sample table of `rounds`: whether each sample passed by round r, its coverage."""
    return per_sample_table(merged_rows(attempts(rounds), len(rounds)), model="model")


def per_task_by_round(rounds: list) -> pd.DataFrame:
    """Tasks x rounds: each task's Pass@1 after round r (any round up to r passed)."""
    table = samples_by_round(rounds)
    columns = [f"passed_r{r}" for r in range(1, len(rounds) + 1)]
    return table[["task_id", *columns]].astype({c: float for c in columns}).groupby("task_id").mean()


def pass1_by_round(args, rounds: list) -> list[dict]:
    """Pass@1 after each round with its bootstrap interval, and the mean coverage."""
    curve = round_table(samples_by_round(rounds), {"resamples": args.bootstrap})
    return [{"round": int(row["round"]), "pass1": row["pass@1"], "ci95": [row["pass@1_lo"], row["pass@1_hi"]],
             "mean_coverage": row["mean_coverage"], "tasks": int(row["tasks"])} for _, row in curve.iterrows()]


def with_costs(args, rounds: list, costs: list) -> list[dict]:
    """pass1_by_round of `rounds`, each round with its cost."""
    by_round = {row["round"]: row for row in pass1_by_round(args, rounds)}
    return [{**by_round[c["round"]], "cost": c} for c in costs]


def paired_by_round(args, rounds: list, control: list) -> list[dict]:
    """Per round: Pass@1 of `rounds` minus the `control` arm's, with the paired bootstrap
    interval over tasks."""
    ours, theirs = per_task_by_round(rounds), per_task_by_round(control)
    out = []
    for number in range(1, len(rounds) + 1):
        a, b = ours[f"passed_r{number}"], theirs[f"passed_r{number}"].reindex(ours.index)
        low, high = paired_bootstrap_interval(list(a), list(b), resamples=args.bootstrap)
        out.append({"round": number, "difference": float((a - b).mean()), "ci95": [low, high]})
    return out


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.work.mkdir(parents=True, exist_ok=True)
    model, tasks = base_model(args), evaluation_tasks(args)
    arms = {arm: run_arm(args, model, tasks, arm) for arm in ["feedback", *([args.control] if args.control else [])]}
    rounds, costs = arms["feedback"]
    report = {
        "benchmark": "feedback_rounds", "command": args.command, "device": versions().get("device"),
        "versions": versions(), "model": str(args.model), "tasks": len(tasks), "k": args.protocol["k"],
        "protocol": args.protocol, "rounds": args.rounds, "rule": "a sample passes when any round up to r passes",
        "pass1_by_round": with_costs(args, rounds, costs),
    }
    if args.control:
        control, control_costs = arms[args.control]
        report["control"] = f"{args.control}: a later round redraws the original prompt (no feedback), new seed"
        report[f"pass1_by_round_{args.control}"] = with_costs(args, control, control_costs)
        report[f"feedback_minus_{args.control}"] = paired_by_round(args, rounds, control)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, report)
    print(json.dumps({r["round"]: [round(r["pass1"], 4), r["ci95"]] for r in report["pass1_by_round"]}), flush=True)
    return report


if __name__ == "__main__":
    main()
