"""Preflight: does the harness score the tasks' own stimuli as expected, here?

Every task's reference stimulus must pass and its trivial stimulus must not. When this
fails, every candidate of the run would be scored wrongly too (issue 13: a foreign
Python whose pytest plugin tripped the guard scored every candidate `runtime_error`, and
the workflow ran to the end with all-zero tables), so the workflow runs it first, with
the scoring jobs' sandbox settings and resources, and stops on the first mismatch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from chorus.harness.sandbox import SandboxLimits
from chorus.harness.score import SimResult, score_many
from chorus.tasks import Task


@dataclass(frozen=True)
class Check:
    task_id: str
    stimulus: str  # "reference" or "trivial"
    expected_pass: bool
    result: SimResult

    @property
    def ok(self) -> bool:
        # a trivial stimulus must fail on coverage, not because the harness is broken:
        # `below_target` is the only expected way to fail
        if self.expected_pass:
            return self.result.passed
        return not self.result.passed and self.result.status == "below_target"

    def describe(self) -> str:
        wanted = "pass" if self.expected_pass else "fail with below_target"
        detail = _key_lines(self.result.detail)
        return (
            f"task {self.task_id}: {self.stimulus} stimulus should {wanted}, got status "
            f"{self.result.status} (score {self.result.score:.3f}); detail: {detail}"
        )


_ERROR_LINE = re.compile(r"\b\w*(Error|Exception|Failure)\b.*:")


def _key_lines(detail: str, keep: int = 3) -> str:
    """The lines of a log tail that name an error (the last `keep`), else its end."""
    lines = [
        line.strip()
        for line in detail.splitlines()
        if _ERROR_LINE.search(line) and not line.lstrip().startswith("raise ")  # not source lines
    ]
    unique = list(dict.fromkeys(lines))[-keep:]
    text = " | ".join(unique) if unique else " ".join(detail.split())
    return text[-600:] or "-"


class PreflightError(RuntimeError):
    """The harness does not score the tasks' own stimuli as expected."""


def selfcheck(
    tasks: list[Task],
    *,
    limits: SandboxLimits | None = None,
    workers: int | None = None,
    cache_dir: str | Path | None = None,
    timeouts=None,
) -> list[Check]:
    """Score every task's reference and trivial stimulus (those it has) in parallel."""
    plan = [
        (task, name, path, name == "reference")
        for task in tasks
        for name, path in (("reference", task.reference_stimulus), ("trivial", task.trivial_stimulus))
        if path is not None
    ]
    results = score_many(
        [(task, path.read_text()) for task, _, path, _ in plan], workers=workers, limits=limits, cache_dir=cache_dir,
        timeouts=timeouts,
    )
    return [Check(task.id, name, expected, result) for (task, name, _, expected), result in zip(plan, results)]


def failure_message(checks: list[Check]) -> str | None:
    """One message naming every mismatch (task, stimulus, status, detail), or None."""
    bad = [c for c in checks if not c.ok]
    if not bad:
        return None
    lines = [
        f"preflight failed: {len(bad)} of {len(checks)} checks of the tasks' own stimuli do not "
        "score as expected, so no candidate of this run would be scored correctly "
        "(docs/harness.md, Preflight):",
        *(f"  {c.describe()}" for c in bad),
    ]
    return "\n".join(lines)


def summary(checks: list[Check]) -> dict:
    return {
        "checks": len(checks),
        "tasks": len({c.task_id for c in checks}),
        "results": [
            {"task_id": c.task_id, "stimulus": c.stimulus, "status": c.result.status, "ok": c.ok}
            for c in checks
        ],
    }


def preflight_tasks(tasks: list[Task]) -> list[Task]:
    """What the workflow's preflight checks: every shipped (or converted) task, and one
    synthetic task per family. The synthetic corpus was verified by the same harness
    when it was made (synth/verify.py); a sample per family is enough to catch a broken
    environment, without simulating a cluster-scale corpus again on the critical path."""
    chosen, families = [], set()
    for task in tasks:
        if task.source != "synthetic":
            chosen.append(task)
        elif task.family not in families:
            families.add(task.family)
            chosen.append(task)
    return chosen


def run_preflight(tasks: list[Task], **kwargs) -> dict:
    """selfcheck(); raises PreflightError with one clear message on any mismatch."""
    checks = selfcheck(tasks, **kwargs)
    message = failure_message(checks)
    if message:
        raise PreflightError(message)
    return summary(checks)
