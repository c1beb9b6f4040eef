"""The verdict of one candidate: its statuses, its dense score, whether it meets the
task's targets. The one definition of the reward's dense score (`dense_score`):
harness/score.py (cocotb stimuli), harness/svtb.py (SystemVerilog testbenches), the RL
reward and the reports all take it from here."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from chorus.harness.coverage import coverage_fractions, exclude_points
from chorus.tasks import AVERAGE, Task

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
# statuses of a run that ended normally: the only ones whose coverage earns reward
SCORED_STATUSES = ("ok", "below_target")


class BuildError(RuntimeError):
    """The design did not compile, or cannot be scored (status "build_error"); `log` holds
    the tail of the compiler output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


@dataclass
class SimResult:
    task_id: str
    passed: bool
    score: float  # dense_score of the replayed coverage; 0 unless the run ended normally
    status: str
    coverage: dict[str, float] = field(default_factory=dict)
    detail: str = ""
    sim_time_s: float = 0.0
    # the candidate's own test verdict (cocotb's results file, written inside its
    # process): a recorded claim, never `passed`; None when it reported nothing
    claimed_pass: bool | None = None
    # Run 2's coverage.dat (the scored replay's), for the feedback of coverage-closure
    # rounds (harness/feedback.py); never serialised
    coverage_dat: str | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        record = asdict(self)
        del record["coverage_dat"]
        return record


def dense_score(coverage: dict[str, float], target: dict[str, float]) -> float:
    """The dense reward: the mean over the targeted metrics of min(achieved / target, 1)
    (a target of 0 counts as met); 0 without a target."""
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


def missed_targets(coverage: dict[str, float], target: dict[str, float]) -> dict[str, str]:
    """metric -> "achieved<goal" for every target `coverage` does not meet."""
    return {
        m: f"{coverage.get(m, 0.0):.3f}<{goal}"
        for m, goal in target.items()
        if coverage.get(m, 0.0) + 1e-9 < goal
    }


def with_averages(counts: dict[str, tuple[int, int]], task: Task) -> dict[str, float]:
    """Metric -> fraction, plus `average` when the task's target has it: the mean over
    the task's average groups of each group's pooled hit/total, groups without points
    left out (as Xcelium leaves out metrics without items; docs/cvdp.md)."""
    coverage = coverage_fractions(counts)
    if AVERAGE in task.coverage_target:
        grades = []
        for metrics in task.average_groups().values():
            hit = sum(counts.get(m, (0, 0))[0] for m in metrics)
            total = sum(counts.get(m, (0, 0))[1] for m in metrics)
            if total:
                grades.append(hit / total)
        coverage[AVERAGE] = sum(grades) / len(grades) if grades else 0.0
    return coverage


def coverage_verdict(task: Task, coverage: dict[str, float], wall_s: float) -> SimResult:
    """The verdict of a run that ended normally, from the coverage it reached:
    `ok` (passed) when every target is met, else `below_target`; no coverage at all is
    `no_coverage`, score 0."""
    if not coverage:
        return failed(task, "no_coverage", "no coverage data written", wall_s)
    reward = dense_score(coverage, task.coverage_target)
    if meets_target(coverage, task.coverage_target):
        return SimResult(task.id, True, reward, "ok", coverage, "", round(wall_s, 3))
    detail = f"missed: {missed_targets(coverage, task.coverage_target)}"
    return SimResult(task.id, False, reward, "below_target", coverage, detail, round(wall_s, 3))


def failed(task: Task, status: str, detail: str = "", wall_s: float = 0.0,
           coverage: dict[str, float] | None = None) -> SimResult:
    """A run that did not end normally: score 0 and not passed, whatever coverage it
    reached (kept in `coverage` for diagnosis only)."""
    return SimResult(task.id, False, 0.0, status, coverage or {}, detail, round(wall_s, 3))


def points_for(task: Task, universe: dict[str, list[str]]) -> dict[str, list[str]]:
    """The points of `universe` (metric -> point ids of a build) that `task` counts: less
    its `coverage_exclude`. Raises BuildError when a metric with a target above 0 has no
    point left (a `user` target on a design without cover points could never pass)."""
    points = exclude_points(universe, task.coverage_exclude)
    # a target above 0 on a metric without points could never be met; a target of 0 is
    # always met (synthetic verification scores with provisional all-zero targets)
    empty = sorted(
        m for m, goal in task.coverage_target.items() if m != AVERAGE and goal > 0 and not points.get(m)
    )
    if empty:
        excluded = " after coverage_exclude" if task.coverage_exclude else ""
        raise BuildError(
            f"task {task.id} targets {', '.join(empty)} coverage, but its design declares no "
            f"such coverage point{excluded}" + (" (no SystemVerilog cover property)" if "user" in empty else "")
        )
    return points
