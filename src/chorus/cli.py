"""Console scripts: chorus-score (one stimulus) and chorus-eval (a JSONL of generations)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chorus.harness import SandboxLimits, score, score_generations
from chorus.tasks import DEFAULT_TASK_ROOT, load_task, load_tasks, tasks_by_id


def _limits(args) -> SandboxLimits:
    return SandboxLimits(timeout_s=args.timeout, mem_mb=args.mem_mb)


def _add_limit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per candidate")
    parser.add_argument("--mem-mb", type=int, default=2048, help="address-space limit per candidate")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="Verilator build cache (default: $CHORUS_CACHE_DIR or .cache/verilator)"
    )


def score_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="chorus-score",
        description="Simulate one stimulus (a cocotb module, or a SystemVerilog testbench for "
        "answer_language systemverilog tasks) for one task; print the result as JSON.",
    )
    parser.add_argument("task_dir", type=Path, help="a task folder (docs/task_format.md)")
    parser.add_argument("stimulus", type=Path, help="the stimulus (or a model completion holding it)")
    _add_limit_args(parser)
    args = parser.parse_args(argv)
    from chorus.harness.score import _stimulus_extractor

    extract = _stimulus_extractor()
    task = load_task(args.task_dir)
    result = score(
        task, extract(args.stimulus.read_text(), task.answer_language), limits=_limits(args), cache_dir=args.cache_dir
    )
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.passed else 1


BASE_COLUMNS = ["task_id", "sample_id", "passed", "score", "status"]


def _columns(results: list[dict]) -> list[str]:
    """ids and verdict first, then one cov_<metric> column per metric seen, then timing."""
    metrics = sorted({k for r in results for k in r if k.startswith("cov_")})
    return BASE_COLUMNS + metrics + ["sim_time_s", "detail"]


def eval_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="chorus-eval",
        description="Score a JSONL of generations ({task_id, sample_id, completion}) and write "
        "a per-sample table; a killed run resumes without re-simulating finished samples.",
    )
    parser.add_argument("--tasks", type=Path, default=DEFAULT_TASK_ROOT, help="task root folder")
    parser.add_argument("--generations", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="table: .csv or .parquet")
    parser.add_argument("--workers", type=int, default=None, help="parallel sandboxes (default: all cores)")
    parser.add_argument(
        "--resume",
        "--append",
        dest="resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the results of an interrupted run (the <out>.jsonl.partial sidecar) and simulate "
        "only the missing samples (default); --no-resume starts afresh",
    )
    _add_limit_args(parser)
    args = parser.parse_args(argv)
    import pandas as pd

    from chorus.io import read_jsonl

    rows = read_jsonl(args.generations)
    tasks = tasks_by_id(load_tasks(args.tasks))
    unknown = sorted({r["task_id"] for r in rows} - tasks.keys())
    if unknown:
        parser.error(f"generations name unknown task(s): {unknown}")
    results = score_generations(
        rows,
        tasks,
        args.out.with_suffix(".jsonl"),
        workers=args.workers,
        limits=_limits(args),
        cache_dir=args.cache_dir,
        resume=args.resume,
    )
    table = pd.DataFrame(results, columns=_columns(results))
    if len({type(v) for v in table["sample_id"]}) > 1:  # mixed int/str ids: one type for parquet
        table["sample_id"] = table["sample_id"].astype(str)
    if args.out.suffix == ".parquet":
        table.to_parquet(args.out, index=False)
    else:
        table.to_csv(args.out, index=False)
    passed = int(table["passed"].sum()) if len(table) else 0
    print(f"{len(table)} samples scored, {passed} passed; table: {args.out}", file=sys.stderr)
    return 0
