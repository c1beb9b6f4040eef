"""Per-task simulation timeouts from the reference stimulus's measured simulation time.

One global wall-clock limit (config `simulation.timeout_s`, 60 s by default) lets a single
hanging candidate hold a whole GRPO step for a minute while the other sandboxes idle.
A task whose reference stimulus simulates in 0.5 s has no use for more than a few
seconds: the limit of a task is `factor` x the reference's wall time, at least `floor_s`,
at most the global limit. The reference is simulated once per (design, reference text),
in the same sandbox and limits as candidates, and its time is kept next to the build
(`<build>/reference_time_<digest>.json`); concurrent scorers (threads or processes)
measure it once, under a file lock, and write it atomically.

A reference that does not pass (or a task without one) keeps the global limit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from chorus.harness.build import _locked
from chorus.harness.cocotb_run import run_candidate
from chorus.harness.sandbox import SandboxLimits
from chorus.io import atomic_write_json
from chorus.tasks import Task

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TimeoutPolicy:
    """Per-task limit = clamp(factor x reference wall time, floor_s, the global limit)."""

    factor: float = 10.0
    floor_s: float = 5.0

    @classmethod
    def from_config(cls, simulation: dict) -> TimeoutPolicy | None:
        """The policy of config `simulation` (`timeout_factor`, `timeout_floor_s`); None when
        `timeout_factor` is null or 0 (every task gets `timeout_s`)."""
        factor = simulation["timeout_factor"]
        if not factor:
            return None
        return cls(factor=float(factor), floor_s=float(simulation["timeout_floor_s"]))


def sandbox_settings(simulation: dict) -> tuple[SandboxLimits, TimeoutPolicy | None]:
    """The sandbox limits and per-task timeout policy of config `simulation` (a job's
    `simulation` settings: chorus.plan.Plan.simulation with `nice`, plan.job_settings):
    the one place the scoring jobs, the RL reward and the preflight turn it into settings,
    so the same candidate scores the same everywhere. Each key keeps its schema name, and
    a missing one fails rather than taking a default the config did not set."""
    limits = SandboxLimits(
        timeout_s=simulation["timeout_s"],
        mem_mb=simulation["mem_mb"],
        build_timeout_s=simulation["build_timeout_s"],
        nice=simulation["nice"],
    )
    return limits, TimeoutPolicy.from_config(simulation)


def _timing_file(build_dir: Path, reference_text: str) -> Path:
    digest = hashlib.sha256(reference_text.encode()).hexdigest()[:16]
    return Path(build_dir) / f"reference_time_{digest}.json"


def _read_timing(path: Path, limits: SandboxLimits) -> dict | None:
    """The cached timing, unless it is a failure under a lower ceiling than `limits`
    (a reference cut off at 10 s says nothing about a 60 s limit): then measure again."""
    try:
        timing = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not timing.get("passed") and float(timing.get("limit_s", 0)) < limits.timeout_s:
        return None
    return timing


def reference_timing(task: Task, build_dir: str | Path, limits: SandboxLimits) -> dict | None:
    """{wall_s, passed, task} of the task's reference stimulus simulated in the sandbox
    under `limits`, measured on first use and cached in `build_dir`; None without one."""
    if task.reference_stimulus is None or not Path(task.reference_stimulus).is_file():
        return None
    text = Path(task.reference_stimulus).read_text()
    path = _timing_file(Path(build_dir), text)
    timing = _read_timing(path, limits)
    if timing is not None:
        return timing
    with _locked(path.with_name("." + path.name + ".lock")):
        timing = _read_timing(path, limits)  # measured by another scorer while we waited
        if timing is not None:
            return timing
        run = run_candidate(text, Path(build_dir), task.toplevel, limits, seed=0)
        passed = not run.timed_out and bool(run.tests) and not run.failures
        timing = {"task": task.id, "wall_s": round(run.wall_s, 4), "passed": passed,
                  "limit_s": limits.timeout_s}
        atomic_write_json(path, timing)
        log.info("reference simulation of %s: %s", task.id, timing)
    return timing


def task_limits(task: Task, build_dir: str | Path, limits: SandboxLimits,
                policy: TimeoutPolicy | None) -> SandboxLimits:
    """`limits` with the task's own wall-clock limit under `policy` (unchanged without a
    policy, a reference, or a passing reference run)."""
    if policy is None:
        return limits
    timing = reference_timing(task, build_dir, limits)
    if not timing or not timing.get("passed"):
        return limits
    timeout = min(limits.timeout_s, max(policy.floor_s, policy.factor * float(timing["wall_s"])))
    return dataclasses.replace(limits, timeout_s=timeout)
