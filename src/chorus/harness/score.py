"""Score candidate stimuli: simulate in the sandbox, read coverage, decide pass/fail."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chorus.harness.build import BuildError, ensure_build
from chorus.harness.coverage import coverage_fractions
from chorus.harness.sandbox import SandboxLimits, run_candidate
from chorus.tasks import Task

STATUSES = (
    "ok",
    "below_target",
    "syntax_error",
    "runtime_error",
    "timeout",
    "memory",
    "output_limit",
    "no_coverage",
    "build_error",
    "sandbox_error",
)
_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")


@dataclass
class SimResult:
    task_id: str
    passed: bool
    score: float  # dense reward: mean over targeted metrics of min(achieved/target, 1)
    status: str
    coverage: dict[str, float] = field(default_factory=dict)
    detail: str = ""
    sim_time_s: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def dense_score(coverage: dict[str, float], target: dict[str, float]) -> float:
    if not target:
        return 0.0
    parts = [
        1.0 if goal <= 0 else min(coverage.get(metric, 0.0) / goal, 1.0)
        for metric, goal in target.items()
    ]
    return sum(parts) / len(parts)


def meets_target(coverage: dict[str, float], target: dict[str, float]) -> bool:
    # a tiny tolerance so a target of 1.0 is met by 1.0 computed as hit/total
    return all(coverage.get(m, 0.0) + 1e-9 >= goal for m, goal in target.items())


def _syntax_error(stimulus_text: str) -> str | None:
    try:
        compile(stimulus_text, "stimulus.py", "exec")
    except SyntaxError as err:
        return f"line {err.lineno}: {err.msg}"
    except ValueError as err:  # e.g. null bytes
        return str(err)
    return None


def score(
    task: Task,
    stimulus_text: str,
    *,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
) -> SimResult:
    """Simulate one candidate stimulus for `task`; never raises for a bad candidate."""
    syntax = _syntax_error(stimulus_text)
    if syntax is not None:
        return SimResult(task.id, False, 0.0, "syntax_error", detail=syntax)
    try:
        build_dir = ensure_build(task, cache_dir)
    except BuildError as err:
        return SimResult(task.id, False, 0.0, "build_error", detail=f"{err}\n{err.log[-1500:]}")
    try:
        run = run_candidate(stimulus_text, build_dir, task.toplevel, limits or SandboxLimits(), seed)
    except Exception as err:  # the sandbox itself failed: report, never crash the caller
        return SimResult(task.id, False, 0.0, "sandbox_error", detail=repr(err))
    return judge(task, run)


def judge(task: Task, run) -> SimResult:
    """Turn a SandboxResult into the task's verdict."""
    coverage = coverage_fractions(run.coverage) if run.coverage else {}
    reward = dense_score(coverage, task.coverage_target) if coverage else 0.0
    tail = run.log_tail[-1500:]

    def result(status: str, detail: str = "", passed: bool = False) -> SimResult:
        return SimResult(task.id, passed, reward, status, coverage, detail, round(run.wall_s, 3))

    if run.timed_out:
        return result("timeout", "wall-clock limit reached")
    if run.output_limited:
        return result("output_limit", "the stimulus wrote more output than allowed")
    failures = " | ".join(run.failure_messages)
    if any(m in failures or m in tail for m in _MEMORY_MARKERS):
        return result("memory", (failures or tail)[-1500:])
    if run.tests is None:
        return result("runtime_error", f"simulation ended abnormally (exit {run.returncode})\n{tail}")
    if run.tests == 0:
        return result("runtime_error", "no @cocotb.test() found in the stimulus")
    if run.failures:
        return result("runtime_error", failures[-1500:] or tail)
    if not coverage:
        return result("no_coverage", f"no coverage data written\n{tail}")
    if meets_target(coverage, task.coverage_target):
        return result("ok", passed=True)
    missed = {
        m: f"{coverage.get(m, 0.0):.3f}<{goal}"
        for m, goal in task.coverage_target.items()
        if coverage.get(m, 0.0) + 1e-9 < goal
    }
    return result("below_target", f"missed: {missed}")


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def score_many(
    items: list[tuple[Task, str]],
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    seeds: list[int] | None = None,
) -> list[SimResult]:
    """Score many (task, stimulus) pairs in parallel; results in the order of `items`.

    Each distinct design is built once, up front; the candidates then run in parallel
    sandboxes (threads that each wait on one confined child process).
    """
    workers = workers or default_workers()
    designs = {task.design_hash(): task for task, _ in items}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(_prebuild, designs.values(), [cache_dir] * len(designs)))
        seeds = seeds or [0] * len(items)
        return list(
            pool.map(
                lambda item_seed: score(
                    item_seed[0][0], item_seed[0][1], limits=limits, cache_dir=cache_dir, seed=item_seed[1]
                ),
                zip(items, seeds),
            )
        )


def _prebuild(task: Task, cache_dir) -> None:
    try:
        ensure_build(task, cache_dir)
    except BuildError:
        pass  # reported per candidate by score()


def score_generations(
    rows: list[dict],
    tasks: dict[str, Task],
    out_jsonl: str | Path,
    *,
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    batch_size: int | None = None,
) -> list[dict]:
    """Score generation rows ({task_id, sample_id, completion}) and write one result row
    per sample to `out_jsonl`.

    Results are appended to `<out_jsonl>.partial` as each batch finishes, so a killed
    run resumes without re-simulating finished samples; `out_jsonl` itself appears
    (atomically) only once every row has its result.
    """
    from chorus.io import read_jsonl, write_jsonl
    from chorus.prompts import extract_stimulus

    out_jsonl = Path(out_jsonl)
    partial = out_jsonl.with_name(out_jsonl.name + ".partial")
    done = {(r["task_id"], r["sample_id"]): r for r in read_jsonl(partial)}
    todo = [r for r in rows if (r["task_id"], r["sample_id"]) not in done]
    workers = workers or default_workers()
    batch_size = batch_size or max(1, workers * 4)
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    with open(partial, "a") as sidecar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            results = score_many(
                [(tasks[r["task_id"]], extract_stimulus(r["completion"])) for r in batch],
                workers=workers,
                limits=limits,
                cache_dir=cache_dir,
                seeds=[int(r["sample_id"]) for r in batch],
            )
            for row, result in zip(batch, results):
                record = flatten_result(row, result)
                done[(row["task_id"], row["sample_id"])] = record
                sidecar.write(json.dumps(record, sort_keys=True) + "\n")
            sidecar.flush()
            os.fsync(sidecar.fileno())
    ordered = [done[(r["task_id"], r["sample_id"])] for r in rows]
    write_jsonl(out_jsonl, ordered)
    partial.unlink(missing_ok=True)
    return ordered


def flatten_result(row: dict, result: SimResult) -> dict:
    """One table row: ids, verdict, dense score, a column per coverage metric."""
    record = {
        "task_id": row["task_id"],
        "sample_id": row["sample_id"],
        "passed": result.passed,
        "score": round(result.score, 6),
        "status": result.status,
        "sim_time_s": result.sim_time_s,
        "detail": result.detail[-500:],
    }
    for metric, value in sorted(result.coverage.items()):
        record[f"cov_{metric}"] = round(value, 6)
    return record
