"""chorus-synth: generate (and verify in simulation) synthetic tasks (docs/synth.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chorus.synth import all_families


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="chorus-synth",
        description="Generate synthetic coverage tasks from parameterised design families; by default every "
        "task is verified in Verilator (reference passes, trivial fails) and rejects are dropped.",
    )
    parser.add_argument("--list-families", action="store_true", help="print the family names, one a line")
    parser.add_argument("--out", type=Path, help="folder receiving the task folders")
    parser.add_argument("--train-designs", type=int, default=10)
    parser.add_argument("--test-designs", type=int, default=0)
    parser.add_argument("--families", default="all", help="comma-separated family names, or 'all'")
    parser.add_argument("--test-families", default="", help="held-out families (comma-separated): test split only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", type=int, default=3, help="reference stimuli per design")
    parser.add_argument("--shard", type=int, default=0)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--workers", type=int, default=None, help="parallel simulations (default: all cores)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="Verilator build cache")
    parser.add_argument(
        "--verify", action=argparse.BooleanOptionalAction, default=True, help="simulate and keep verified tasks only"
    )
    args = parser.parse_args(argv)
    if args.list_families:
        print("\n".join(all_families()))
        return 0
    if args.out is None:
        parser.error("--out is required (or --list-families)")
    from chorus.synth.corpus import design_rng, make_design, shard_jobs, task_id, write_task
    from chorus.harness.score import default_workers
    from chorus.synth.verify import generate_and_verify

    cfg = {
        "seed": args.seed,
        "families": "all" if args.families == "all" else args.families.split(","),
        "test_families": [f for f in args.test_families.split(",") if f],
        "train_designs": args.train_designs,
        "test_designs": args.test_designs,
    }
    jobs = shard_jobs(cfg, args.shard, args.shards)
    if args.verify:
        stats = generate_and_verify(
            jobs, args.out, seed=args.seed, variants=args.variants, workers=args.workers or default_workers(), cache_dir=args.cache_dir
        )
        print(json.dumps({k: v for k, v in stats.items() if k != "tasks"}, indent=2))
        return 0 if stats["kept"] else 1
    for split, index, family in jobs:
        tid = task_id(family, split, args.seed, index)
        design = make_design(family, args.seed, split, index)
        write_task(design, args.out / tid, tid, split, args.variants, design_rng(args.seed, split, index + 10**6))
    print(f"wrote {len(jobs)} unverified tasks to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
