"""chorus-eval-array: score a large JSONL of generations outside the workflow as a job
array (submitit): on SLURM one array task per shard, locally (`--cluster local`) one
process per shard, the same code path.

Each array task scores every `shards`-th row (`rows[shard::shards]`) with
chorus.harness.score_generations into `<out>.shards/shard<i>.jsonl`, so a re-submitted
array resumes without re-simulating finished samples; the caller then joins the shards
into `<out>` in the order of the input. Inside the workflow, score shards are Snakemake
jobs instead (rules/eval.smk).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def score_shard(generations: str, task_root: str, out_dir: str, shard: int, shards: int,
                limits: dict, cache_dir: str | None, workers: int | None) -> str:
    """One array task: score its slice of the rows; returns its shard file."""
    from chorus.harness import SandboxLimits, score_generations
    from chorus.harness.score import read_generations
    from chorus.prompts import extract_answer
    from chorus.tasks import load_tasks, tasks_by_id

    tasks = tasks_by_id(load_tasks(task_root))
    rows = read_generations(generations, tasks)[0][shard::shards]  # the caller reports bad lines
    out = Path(out_dir) / f"shard{shard}.jsonl"
    score_generations(rows, tasks, out, workers=workers,
                      limits=SandboxLimits(**limits), cache_dir=cache_dir, extract=extract_answer)
    return str(out)


def score_array(generations: str | Path, task_root: str | Path, out_jsonl: str | Path, *,
                shards: int, cluster: str | None = None, folder: str | Path | None = None,
                limits: dict | None = None, cache_dir: str | None = None, workers: int | None = None,
                executor_parameters: dict | None = None) -> tuple[list[dict], list[str]]:
    """Submit one array task per shard through submitit (`cluster`: None - SLURM when
    sbatch exists, else local; "local"; "slurm"; "debug" - in this process), wait, and
    write the joined results to `out_jsonl` in input order. Returns the rows and one
    message per input line that could not be scored (chorus.harness.score.read_generations)."""
    import submitit

    from chorus.harness.score import _sample_key, read_generations
    from chorus.io import read_jsonl, write_jsonl
    from chorus.tasks import load_tasks, tasks_by_id

    rows, problems = read_generations(generations, tasks_by_id(load_tasks(task_root)))

    out_jsonl = Path(out_jsonl)
    shard_dir = out_jsonl.with_name(out_jsonl.name + ".shards")
    shard_dir.mkdir(parents=True, exist_ok=True)
    executor = submitit.AutoExecutor(folder=str(folder or shard_dir / "submitit"), cluster=cluster)
    executor.update_parameters(**(executor_parameters or {}))
    limits = limits or {"timeout_s": 60.0, "mem_mb": 2048}
    jobs = executor.map_array(
        score_shard,
        [str(generations)] * shards, [str(task_root)] * shards, [str(shard_dir)] * shards,
        list(range(shards)), [shards] * shards, [limits] * shards, [cache_dir] * shards,
        [workers] * shards,
    )
    shard_files = [job.result() for job in jobs]  # raises the first failed task's error
    # a result belongs to its content (task, sample id, completion hash): duplicate ids with
    # other code never share a verdict
    results = {_sample_key(row): row for path in shard_files for row in read_jsonl(path)}
    ordered = [results[_sample_key(r)] for r in rows]
    write_jsonl(out_jsonl, ordered)
    return ordered, problems


def main(argv: list[str] | None = None) -> int:
    from chorus.tasks import DEFAULT_TASK_ROOT

    parser = argparse.ArgumentParser(
        prog="chorus-eval-array",
        description="Score a JSONL of generations as a submitit job array (SLURM, or local processes).",
    )
    parser.add_argument("--tasks", type=Path, default=DEFAULT_TASK_ROOT, help="task root folder")
    parser.add_argument("--generations", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="result JSONL, one row per sample")
    parser.add_argument("--shards", type=int, default=8, help="array tasks")
    parser.add_argument("--cluster", choices=["slurm", "local", "debug"], default=None,
                        help="default: SLURM when sbatch is on PATH, else local processes")
    parser.add_argument("--partition", default=None, help="SLURM partition")
    parser.add_argument("--account", default=None, help="SLURM account")
    parser.add_argument("--cpus", type=int, default=4, help="CPUs (parallel sandboxes) per array task")
    parser.add_argument("--mem-gb", type=int, default=16, help="memory per array task")
    parser.add_argument("--time-min", type=int, default=240, help="time limit per array task")
    parser.add_argument("--parallel", type=int, default=None, help="array tasks running at once")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per candidate")
    parser.add_argument("--mem-mb", type=int, default=2048, help="address-space limit per candidate")
    parser.add_argument("--cache-dir", default=None, help="Verilator build cache (shared storage)")
    args = parser.parse_args(argv)
    parameters = {"timeout_min": args.time_min, "cpus_per_task": args.cpus, "mem_gb": args.mem_gb}
    if args.partition:
        parameters["slurm_partition"] = args.partition
    if args.account:
        parameters["slurm_account"] = args.account
    if args.parallel:
        parameters["slurm_array_parallelism"] = args.parallel
    rows, problems = score_array(args.generations, args.tasks, args.out, shards=args.shards, cluster=args.cluster,
                       limits={"timeout_s": args.timeout, "mem_mb": args.mem_mb}, cache_dir=args.cache_dir,
                       workers=args.cpus, executor_parameters=parameters)
    for problem in problems:
        print(f"chorus-eval-array: {args.generations} {problem}: left out", file=sys.stderr)
    passed = sum(bool(r["passed"]) for r in rows)
    print(f"{len(rows)} samples scored in {args.shards} array tasks, {passed} passed: {args.out}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
