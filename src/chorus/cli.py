"""Console scripts: chorus-score (one stimulus, or --selfcheck of the tasks' own stimuli)
and chorus-eval (a JSONL of generations).

A task that does not load or an unreadable input ends the command with one line naming
it (exit 2), not a traceback."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chorus.harness import SandboxLimits, score, score_generations
from chorus.tasks import DEFAULT_TASK_ROOT, TaskFormatError, load_task, load_tasks, tasks_by_id

INPUT_ERRORS = (TaskFormatError, OSError, UnicodeDecodeError)


def _input_error(prog: str, err: Exception) -> int:
    message = " ".join(str(err).split()) if not isinstance(err, OSError) or not err.filename else (
        f"{err.strerror or err}: {err.filename}"
    )
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _load_task_dirs(dirs: list[Path]):
    """Tasks of each folder given: a task folder (it has task.yaml) or a task root."""
    tasks = []
    for folder in dirs:
        tasks += [load_task(folder)] if (folder / "task.yaml").is_file() else load_tasks(folder)
    return tasks


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
        "answer_language systemverilog tasks) for one task; print the result as JSON. "
        "With --selfcheck: score every task's reference (must pass) and trivial stimulus "
        "(must fail with below_target) and report any mismatch (the workflow's preflight).",
    )
    parser.add_argument("task_dir", type=Path, nargs="?", help="a task folder (docs/task_format.md)")
    parser.add_argument("stimulus", type=Path, nargs="?", help="the stimulus (or a model completion holding it)")
    parser.add_argument("--selfcheck", action="store_true", help="check the harness on the tasks' own stimuli")
    parser.add_argument(
        "--tasks", type=Path, nargs="+", default=None,
        help="with --selfcheck: task folders or task roots (default: the shipped tasks)",
    )
    parser.add_argument("--workers", type=int, default=None, help="with --selfcheck: parallel sandboxes")
    _add_limit_args(parser)
    args = parser.parse_args(argv)
    if args.selfcheck:
        if args.task_dir or args.stimulus:
            parser.error("--selfcheck takes its tasks from --tasks, not from positional arguments")
        return _selfcheck(args)
    if args.task_dir is None or args.stimulus is None:
        parser.error("give a task folder and a stimulus (or --selfcheck)")
    from chorus.prompts import extract_answer

    try:
        task = load_task(args.task_dir)
        stimulus = args.stimulus.read_text()
    except INPUT_ERRORS as err:
        return _input_error(parser.prog, err)
    result = score(task, extract_answer(stimulus, task.answer_language), limits=_limits(args), cache_dir=args.cache_dir)
    print(json.dumps(result.to_dict(), indent=2))
    return 0 if result.passed else 1


def _selfcheck(args) -> int:
    from chorus.harness.preflight import failure_message, selfcheck

    try:
        tasks = _load_task_dirs(args.tasks or [DEFAULT_TASK_ROOT])
    except INPUT_ERRORS as err:
        return _input_error("chorus-score", err)
    checks = selfcheck(tasks, limits=_limits(args), workers=args.workers, cache_dir=args.cache_dir)
    message = failure_message(checks)
    if message:
        print(message, file=sys.stderr)
        return 1
    print(f"selfcheck passed: {len(checks)} stimuli of {len(tasks)} tasks scored as expected", file=sys.stderr)
    return 0


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
    from chorus.harness.score import read_generations
    from chorus.prompts import extract_answer
    from chorus.report import per_sample_table

    try:
        tasks = tasks_by_id(load_tasks(args.tasks))
        rows, problems = read_generations(args.generations, tasks)
    except INPUT_ERRORS as err:
        return _input_error(parser.prog, err)
    for problem in problems:  # reported, never silently dropped; the rest is scored
        print(f"{parser.prog}: {args.generations} {problem}: left out", file=sys.stderr)
    if problems and not rows:
        print(f"{parser.prog}: error: no line of {args.generations} can be scored", file=sys.stderr)
        return 2
    results = score_generations(
        rows,
        tasks,
        args.out.with_suffix(".jsonl"),
        workers=args.workers,
        limits=_limits(args),
        cache_dir=args.cache_dir,
        resume=args.resume,
        extract=extract_answer,
    )
    table = per_sample_table(results, rest=["sim_time_s", "detail"])
    if args.out.suffix == ".parquet":
        table.to_parquet(args.out, index=False)
    else:
        table.to_csv(args.out, index=False)
    passed = int(table["passed"].sum()) if len(table) else 0
    left_out = f", {len(problems)} line(s) left out (above)" if problems else ""
    print(f"{len(table)} samples scored, {passed} passed{left_out}; table: {args.out}", file=sys.stderr)
    return 1 if problems else 0
