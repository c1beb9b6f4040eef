"""Score candidate stimuli: simulate in the sandbox (Run 1), replay its recorded inputs
without candidate code (Run 2, harness/replay.py), judge the replay's coverage (verdict.py)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chorus.harness.build import ensure_build, load_points_manifest
from chorus.harness.cocotb_run import SandboxResult, run_candidate
from chorus.harness.replay import judge_trace
from chorus.harness.sandbox import SandboxLimits
from chorus.harness.svtb import ensure_sv_build, score_testbench
from chorus.harness.timeouts import TimeoutPolicy, task_limits
from chorus.harness.verdict import (  # noqa: F401  (SimResult, STATUSES: the harness's API)
    STATUSES,
    BuildError,
    SimResult,
    coverage_verdict,
    dense_score,
    failed,
    meets_target,
    points_for,
    with_averages,
)
from chorus.tasks import Task

_MEMORY_MARKERS = ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory")


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
    timeouts: TimeoutPolicy | None = None,
) -> SimResult:
    """Simulate one candidate stimulus for `task`; never raises for a bad candidate.
    `timeouts`: the task's own wall-clock limit from its reference's simulation time
    (chorus.harness.timeouts), `limits.timeout_s` being the ceiling. SystemVerilog
    testbench tasks (answer_language systemverilog) go to harness.svtb."""
    if task.answer_language == "systemverilog":
        return score_testbench(task, stimulus_text, limits=limits, cache_dir=cache_dir, seed=seed)
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
        points = task_points(task, build_dir)
    except BuildError as err:
        return SimResult(task.id, False, 0.0, "build_error", detail=str(err))
    try:
        limits = task_limits(task, build_dir, limits or SandboxLimits(), timeouts)
        run = run_candidate(stimulus_text, build_dir, task.toplevel, limits, seed)
        return judge(task, run, build_dir, points, limits)
    except Exception as err:  # the sandbox itself failed: report, never crash the caller
        return SimResult(task.id, False, 0.0, "sandbox_error", detail=repr(err))


def task_points(task: Task, build_dir: Path) -> dict[str, list[str]] | None:
    """The coverage points `task` counts in the build's manifest (points_for)."""
    universe = load_points_manifest(build_dir)
    return None if universe is None else points_for(task, universe)


def judge(task: Task, run: SandboxResult, build_dir: Path, points: dict[str, list[str]] | None,
          limits: SandboxLimits) -> SimResult:
    """The verdict of a candidate from Run 1 (`run`: how it ended, its recorded inputs,
    its own test report) and Run 2 (the replay of those inputs, our code only): a Run 1
    that did not end normally scores 0 (`failed`); otherwise the score and `passed`
    come from the replay's coverage alone. The candidate's own verdict is only
    `claimed_pass`."""
    result = run1_failure(task, run)
    if result is None:
        result = replay_verdict(task, run, build_dir, points, limits)
    result.sim_time_s = round(run.wall_s + result.sim_time_s, 3)
    result.claimed_pass = bool(run.tests) and not run.failures if run.tests is not None else None
    return result


def run1_failure(task: Task, run: SandboxResult) -> SimResult | None:
    """The failed verdict of a Run 1 that did not end normally; None when it did."""
    tail = run.log_tail[-1500:]
    if run.timed_out:
        return failed(task, "timeout", "wall-clock limit reached")
    if run.output_limited:
        return failed(task, "output_limit", "the stimulus wrote more output than allowed")
    failures = " | ".join(run.failure_messages)
    if any(m in failures or m in tail for m in _MEMORY_MARKERS):
        return failed(task, "memory", (failures or tail)[-1500:])
    if run.tests is None or run.returncode != 0:
        return failed(task, "runtime_error", f"simulation ended abnormally (exit {run.returncode})\n{tail}")
    if run.tests == 0:
        return failed(task, "runtime_error", "no @cocotb.test() found in the stimulus")
    if run.failures:  # the candidate's own failure: a claim that only costs itself
        return failed(task, "runtime_error", failures[-1500:] or tail)
    return None


def replay_verdict(task: Task, run: SandboxResult, build_dir: Path, points: dict[str, list[str]] | None,
                   limits: SandboxLimits) -> SimResult:
    """Run 2: check the recorded inputs, replay them, judge the coverage they reach."""
    from chorus.harness.build import load_input_ports

    widths = [p["width"] for p in load_input_ports(build_dir)]
    return judge_trace(task, run.trace, run.trace_oversized, build_dir / task.toplevel, widths, points,
                       timeout_s=limits.timeout_s, mem_mb=limits.mem_mb)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def score_many(
    items: list[tuple[Task, str]],
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    seeds: list[int] | None = None,
    timeouts: TimeoutPolicy | None = None,
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
                    item_seed[0][0], item_seed[0][1], limits=limits, cache_dir=cache_dir, seed=item_seed[1],
                    timeouts=timeouts,
                ),
                zip(items, seeds),
            )
        )


def prebuild(task: Task, cache_dir=None, limits: SandboxLimits | None = None,
             timeouts: TimeoutPolicy | None = None) -> None:
    """Compile `task`'s design into the cache now (and, with `timeouts`, measure its
    reference's simulation time); a failure is reported per candidate later by score()."""
    try:
        if task.answer_language == "systemverilog":
            ensure_sv_build(task, cache_dir)
        else:
            build_dir = ensure_build(task, cache_dir)
            if timeouts is not None:
                task_limits(task, build_dir, limits or SandboxLimits(), timeouts)
    except Exception:
        pass  # reported per candidate by score()


def sample_seed(sample_id) -> int:
    """A simulator seed per sample: the id itself when it is an integer, else a hash."""
    try:
        return int(sample_id) & 0x7FFFFFFF
    except (TypeError, ValueError):
        return zlib.crc32(str(sample_id).encode()) & 0x7FFFFFFF


def task_fingerprint(task: Task) -> str:
    """Content hash of everything about `task` a verdict depends on: every field (targets,
    exclusions, top level, language, ...) and its design's sources (design_hash)."""
    return hashlib.sha256(f"{task!r}\0{task.design_hash()}".encode("utf-8", "surrogatepass")).hexdigest()


def simulation_key(task_key: str, stimulus_text: str, *, seed: int = 0, limits: SandboxLimits | None = None,
                   timeouts: TimeoutPolicy | None = None) -> str:
    """The identity of one simulation: the task (`task_key`, task_fingerprint), the exact
    text simulated (byte for byte: no stripping, no normalising), the seed and the
    simulation settings. Two candidates with the same key run the very same simulation,
    so one's verdict is a real verdict of the other (docs/harness.md, "Scoring an answer
    once")."""
    settings = json.dumps([task_key, int(seed), repr(limits), repr(timeouts)])
    digest = hashlib.sha256(settings.encode())
    digest.update(b"\0")
    digest.update(stimulus_text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def unchanged(text: str, language: str = "cocotb") -> str:
    """The completion as it is: for rows whose completion is the stimulus itself."""
    return text


GENERATION_FIELDS = ("task_id", "sample_id", "completion")


def completion_digest(completion: str | None) -> str:
    """Content hash of a completion: what a stored verdict is bound to."""
    return hashlib.sha256((completion or "").encode("utf-8", "surrogatepass")).hexdigest()


def _sample_key(row: dict) -> tuple[str, str, str]:
    """What a verdict belongs to: the task, the sample id (1 and "1" are one id, as they
    are one seed) and the code itself, so a verdict is never copied onto other code
    (duplicate ids, a stale sidecar of an earlier generations file)."""
    digest = row.get("completion_sha256") if "completion" not in row else completion_digest(row["completion"])
    return (str(row["task_id"]), str(row["sample_id"]), str(digest))


def _result_key(record: dict) -> tuple[str, str, str] | None:
    """A journal line's sample key; None for a line of an older format (no completion
    hash), which cannot be matched to code and is scored again."""
    if all(name in record for name in ("completion_sha256", "task_id", "sample_id")):
        return _sample_key(record)
    return None


def generation_problem(row, tasks: dict[str, Task] | None = None) -> str | None:
    """Why `row` cannot be scored (None when it can)."""
    if not isinstance(row, dict):
        return f"not a JSON object: {type(row).__name__}"
    missing = [f for f in GENERATION_FIELDS if f not in row]
    if missing:
        return f"missing field(s): {', '.join(missing)}"
    if row["completion"] is not None and not isinstance(row["completion"], str):
        return "field 'completion' is not a string"
    if not isinstance(row["sample_id"], (str, int)) or isinstance(row["sample_id"], bool):
        return "field 'sample_id' is not a string or an integer"
    if tasks is not None and row["task_id"] not in tasks:
        return f"unknown task_id {row['task_id']!r}"
    return None


def read_generations(path: str | Path, tasks: dict[str, Task] | None = None) -> tuple[list[dict], list[str]]:
    """Rows of a generations JSONL that can be scored, and one message per line that
    cannot ("line N: why"), so a bad line is reported, never silently dropped."""
    rows, problems = [], []
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                problems.append(f"line {number}: not valid JSON ({err.msg} at column {err.colno})")
                continue
            problem = generation_problem(row, tasks)
            if problem:
                problems.append(f"line {number}: {problem}")
            else:
                rows.append(row)
    return rows, problems


def score_generations(
    rows: list[dict],
    tasks: dict[str, Task],
    out_jsonl: str | Path,
    *,
    workers: int | None = None,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    resume: bool = True,
    timeouts: TimeoutPolicy | None = None,
    extract: Callable[[str, str], str] = unchanged,
    annotate: Callable[[Task, SimResult], dict] | None = None,
) -> list[dict]:
    """Score generation rows ({task_id, sample_id, completion}) and write one result row
    per scorable sample to `out_jsonl`.

    Each result is appended to the journal `<out_jsonl>.partial` (chorus.journal: flushed
    and fsynced) the moment its sandbox finishes, so a killed run resumes (`resume=True`)
    without re-simulating finished samples; a torn last line is ignored. Results are keyed by
    content (`_sample_key`: task, sample id, hash of the completion, which every result
    row carries as `completion_sha256`): a sidecar line is reused only for the very same
    code. A row that cannot be scored (`generation_problem`) is logged and left out; the
    rest is scored. `out_jsonl` itself appears (atomically) only once every row has its
    result, in the order of `rows`. `extract(completion, answer_language)` turns a
    completion into the code to simulate (model text: chorus.prompts.extract_answer; the
    harness knows nothing of prompts); by default the completion is the code.
    `annotate(task, result)`: more fields for each result row (the feedback of a
    coverage-closure round, harness/feedback.py), computed while the result is at hand.
    """
    from chorus.io import Progress
    from chorus.journal import Journal, journal_path

    out_jsonl = Path(out_jsonl)
    valid = []
    for index, row in enumerate(rows):
        problem = generation_problem(row, tasks)
        if problem:
            logging.getLogger(__name__).warning("generation row %d left out: %s", index, problem)
        else:
            valid.append(row)
    rows = valid
    journal = Journal(journal_path(out_jsonl), _result_key, resume=resume)
    wanted = {_sample_key(r) for r in rows}
    done = journal.done
    for stale in set(done) - wanted:
        del done[stale]
    todo: dict[tuple[str, str, str], dict] = {}  # the same sample twice simulates once
    for row in rows:
        if _sample_key(row) not in done:
            todo.setdefault(_sample_key(row), row)
    todo = list(todo.values())
    workers = workers or default_workers()
    out_jsonl.parent.mkdir(parents=True, exist_ok=True)
    designs = {tasks[r["task_id"]].design_hash(): tasks[r["task_id"]] for r in todo}.values()
    with ThreadPoolExecutor(max_workers=workers) as pool:  # one build per design, in parallel
        list(pool.map(lambda task: prebuild(task, cache_dir), designs))
    progress = Progress("scored samples", len(todo))

    def run(row: dict) -> None:
        result = score(
            tasks[row["task_id"]],
            extract(row["completion"] or "", tasks[row["task_id"]].answer_language),
            limits=limits,
            cache_dir=cache_dir,
            seed=sample_seed(row["sample_id"]),
            timeouts=timeouts,
        )
        record = flatten_result(row, result)
        if annotate is not None:
            record.update(annotate(tasks[row["task_id"]], result))
        journal.append(record)
        progress.update()

    with journal, ThreadPoolExecutor(max_workers=workers) as pool:
        for future in [pool.submit(run, row) for row in todo]:
            future.result()
    # each row keeps its own ids (a verdict shared by 1 and "1" is written under each)
    ordered = [dict(done[_sample_key(r)], task_id=r["task_id"], sample_id=r["sample_id"]) for r in rows]
    journal.finish(out_jsonl, ordered)
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
        "completion_sha256": completion_digest(row["completion"]),
    }
    for metric, value in sorted(result.coverage.items()):
        record[f"cov_{metric}"] = round(value, 6)
    return record
