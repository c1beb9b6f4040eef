"""Two evaluations of benchmarks/learning_signal.py side by side on their shared tasks:
Pass@1 of each, the paired difference with its bootstrap interval over tasks, the tasks
each wins, and the verdicts of each. For two recipes measured in different runs (e.g. the
program styles: `--program-style dut` against the table style), so the interval includes
the run-to-run noise of training and sampling as well as the recipe.

  python benchmarks/paired_evaluations.py \\
      benchmarks/results/learning_signal_dut.json:eval_sft \\
      benchmarks/results/learning_signal_binary_table.json:eval_sft --out benchmarks/results/program_style_dut_vs_table.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_signal import paired  # noqa: E402  (the report's own paired difference)
from recorded_answers import emit  # noqa: E402


def evaluation(spec: str) -> tuple[dict, dict]:
    """`RECORD.json:PHASE` -> (that phase's evaluation, the record)."""
    path, _, phase = spec.rpartition(":")
    record = json.loads(Path(path).read_text())
    if phase not in record["phases"]:
        raise SystemExit(f"{path} has no phase {phase!r} (it has {sorted(record['phases'])})")
    return record["phases"][phase], record


def compare(model_spec: str, baseline_spec: str, resamples: int) -> dict:
    model, model_record = evaluation(model_spec)
    baseline, baseline_record = evaluation(baseline_spec)
    if model["protocol"] != baseline["protocol"]:
        raise SystemExit(f"different protocols: {model['protocol']} vs {baseline['protocol']}")
    tasks = sorted(model["per_task"].keys() & baseline["per_task"].keys())
    better = sum(model["per_task"][t] > baseline["per_task"][t] for t in tasks)
    worse = sum(model["per_task"][t] < baseline["per_task"][t] for t in tasks)
    return {
        "benchmark": "paired_evaluations",
        "command": "python benchmarks/paired_evaluations.py " + " ".join(sys.argv[1:]),
        "protocol": model["protocol"],
        "tasks": len(tasks),
        "model": {"spec": model_spec, "device": model_record.get("device"), **summary(model)},
        "baseline": {"spec": baseline_spec, "device": baseline_record.get("device"), **summary(baseline)},
        "model_minus_baseline": paired(model, baseline, resamples),
        "tasks_better": better,
        "tasks_worse": worse,
    }


def summary(phase: dict) -> dict:
    keys = ("pass1", "pass1_ci95", "mean_coverage", "statuses", "below_target_misses", "cutoff_fraction",
            "median_completion_chars")
    return {k: phase.get(k) for k in keys}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", help="RECORD.json:PHASE, e.g. benchmarks/results/learning_signal_dut.json:eval_sft")
    p.add_argument("baseline", help="RECORD.json:PHASE to compare it with")
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    return emit(compare(args.model, args.baseline, args.bootstrap), args.out)


if __name__ == "__main__":
    main()
