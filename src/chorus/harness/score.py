"""Score candidate stimuli: simulate in the sandbox, read coverage, decide pass/fail."""

from __future__ import annotations

import json
import os
import threading
import zlib
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
    except Exception as err:  # cache folder unusable, toolchain missing, ...
        return SimResult(task.id, False, 0.0, "build_error", detail=f"build failed: {err!r}")
    try:
        run = run_candidate(stimulus_text, build_dir, task.toplevel, limits or SandboxLimits(), seed)
        return judge(task, run)
    except Exception as err:  # the sandbox itself failed: report, never crash the caller
        return SimResult(task.id, False, 0.0, "sandbox_error", detail=repr(err))


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
        list(pool.map(prebuild, designs.values(), [cache_dir] * len(designs)))
        seeds = seeds or [0] * len(items)
        return list(
            pool.map(
                lambda item_seed: score(
                    item_seed[0][0], item_seed[0][1], limits=limits, cache_dir=cache_dir, seed=item_seed[1]
                ),
                zip(items, seeds),
            )
        )


def prebuild(task: Task, cache_dir=None) -> None:
    """Compile `task`'s design into the cache now; a failure is reported per candidate
    later by score()."""
    try:
        ensure_build(task, cache_dir)
    except Exception:
        pass  # reported per candidate by score()


def sample_seed(sample_id) -> int:
    """A simulator seed per sample: the id itself when it is an integer, else a hash."""
    try:
        return int(sample_id) & 0x7FFFFFFF
    except (TypeError, ValueError):
        return zlib.crc32(str(sample_id).encode()) & 0x7FFFFFFF


def _stimulus_extractor():
    """chorus.prompts.extract_stimulus (model text -> code) when available, else identity."""
    try:
        from chorus.prompts import extract_stimulus
    except ImportError:
        return lambda text: text
    return extract_stimulus


def _sample_key(row: dict) -> tuple[str, str]:
    return (str(row["task_id"]), str(row["sample_id"]))


def score_generations(
    rows: list[dict],
    tasks: dict[str, Task],
    out_jsonl: str | Path,
    *,
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    resume: bool = True,
) -> list[dict]:
    """Score generation rows ({task_id, sample_id, completion}) and write one result row
    per sample to `out_jsonl`.

    Each result is appended to the sidecar `<out_jsonl>.partial` (flushed and fsynced)
    the moment its sandbox finishes, so a killed run resumes (`resume=True`) without
    re-simulating finished samples; a torn last line is ignored. `out_jsonl` itself
    appears (atomically) only once every row has its result, in the order of `rows`.
    """
    from chorus.io import Progress, read_jsonl, write_jsonl

    extract = _stimulus_extractor()
    out_jsonl = Path(out_jsonl)
    partial = out_jsonl.with_name(out_jsonl.name + ".partial")
    if not resume:
        partial.unlink(missing_ok=True)
    wanted = {_sample_key(r) for r in rows}
    done = {_sample_key(r): r for r in read_jsonl(partial) if _sample_key(r) in wanted}
    todo: dict[tuple[str, str], dict] = {}  # a duplicated sample simulates once
    for row in rows:
        if _sample_key(row) not in done:
            todo.setdefault(_sample_key(row), row)
    todo = list(todo.values())
    workers = workers or default_workers()
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    for task in {tasks[r["task_id"]].design_hash(): tasks[r["task_id"]] for r in todo}.values():
        prebuild(task, cache_dir)
    lock = threading.Lock()
    progress = Progress("scored samples", len(todo))

    def run(row: dict) -> None:
        result = score(
            tasks[row["task_id"]],
            extract(row["completion"] or ""),
            limits=limits,
            cache_dir=cache_dir,
            seed=sample_seed(row["sample_id"]),
        )
        record = flatten_result(row, result)
        with lock:
            done[_sample_key(row)] = record
            sidecar.write(json.dumps(record, sort_keys=True) + "\n")
            sidecar.flush()
            os.fsync(sidecar.fileno())
            progress.update()

    torn = partial.exists() and partial.stat().st_size and not partial.read_bytes().endswith(b"\n")
    with open(partial, "a") as sidecar:
        if torn:
            sidecar.write("\n")  # a previous run died mid-line: start on a fresh one
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for future in [pool.submit(run, row) for row in todo]:
                future.result()
    ordered = [done[_sample_key(r)] for r in rows]
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
