"""How far does the programmatic reference stimulus (chorus.synth.program) reach without
any model? Renders it for the synthetic tasks of a corpus (the design regenerated from its
task id), scores it in the sandbox against each task's fixed target and prints pass rate and
misses by metric, per family.

  PYTHONPATH=src python benchmarks/program_ceiling.py --manifest results/smollm2_h200/tasks/manifest.json \
      --split test --per-family 2 --out /tmp/ceiling.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

from chorus.harness.score import score_many
from chorus.synth.corpus import design_of
from chorus.synth.program import Budget, render_program
from chorus.tasks import load_manifest


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--root", type=Path, default=Path("."))
    p.add_argument("--split", default="test")
    p.add_argument("--per-family", type=int, default=0, help="first N tasks of each family (0: all)")
    p.add_argument("--phases", type=int, default=Budget.phases)
    p.add_argument("--cycles-per-phase", type=int, default=Budget.cycles_per_phase)
    p.add_argument("--max-hold", type=int, default=Budget.max_hold)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    budget = Budget(args.phases, args.cycles_per_phase, args.max_hold)
    tasks = [t for t in load_manifest(args.manifest, args.split, args.root) if t.id.startswith("syn_")]
    if args.per_family:
        seen = Counter()
        tasks = [t for t in tasks if (seen.update([t.family]) or seen[t.family] <= args.per_family)]
    items = [(t, render_program(design_of(t), budget)) for t in tasks]
    start = time.perf_counter()
    results = score_many(items, workers=args.workers)
    wall = time.perf_counter() - start
    by_family = defaultdict(Counter)
    for (task, _), r in zip(items, results):
        row = by_family[task.family]
        row["tasks"] += 1
        row["passed"] += r.passed
        row[r.status] += 1
        for metric, goal in task.coverage_target.items():
            if r.coverage.get(metric, 0.0) + 1e-9 < goal:
                row[f"miss_{metric}"] += 1
    total = sum(r.passed for r in results)
    report = {
        "budget": budget.__dict__, "tasks": len(results), "passed": total,
        "pass_rate": total / max(1, len(results)), "wall_s": round(wall, 1),
        "sim_time_s_mean": sum(r.sim_time_s for r in results) / max(1, len(results)),
        "by_family": {f: dict(c) for f, c in sorted(by_family.items())},
        "failures": [{"task": t.id, "status": r.status, "coverage": r.coverage, "target": t.coverage_target,
                      "detail": r.detail[:300]} for (t, _), r in zip(items, results) if not r.passed],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
