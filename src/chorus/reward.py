"""GRPO reward functions (TRL's `reward(completions, **columns) -> list[float]`).

The coverage reward of a completion is the coverage it reaches when simulated with the
task's design (`SimResult.score`: mean over the targeted metrics of min(achieved/target,
1)), or, for the ablation, the binary pass. The format reward checks the answer format (a
python block that compiles). Rollout completions of one step are simulated in parallel
sandboxes.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from chorus.harness import SandboxLimits, prebuild, score_many
from chorus.harness.timeouts import TimeoutPolicy
from chorus.prompts import extract_stimulus
from chorus.tasks import Task

log = logging.getLogger(__name__)


def completion_text(completion) -> str:
    """TRL passes conversational completions as message lists, plain ones as strings."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion)
    return completion


class CoverageReward:
    """TRL reward function: `reward(completions, task_id, **kw) -> list[float]`.

    Each completion's stimulus (`extract_stimulus`) is simulated against its task's
    design by `chorus.harness.score_many` (`workers` sandboxes at once). mode "dense":
    `SimResult.score` (coverage reached relative to the target, in [0, 1]); mode
    "binary": 1.0 when the sample passes, else 0.0. `tasks`: a {task_id: Task} mapping or
    a list of tasks. Every call is recorded in `calls` (wall time, reward statistics,
    status counts) and, under GRPOTrainer, logged through its `log_metric` hook.
    `timeouts`: per-task simulation limits from the reference's measured time
    (chorus.harness.timeouts), measured during the background prebuild.
    """

    def __init__(self, tasks: dict[str, Task] | list[Task], mode: str = "dense",
                 workers: int | None = None, limits: SandboxLimits | None = None,
                 timeouts: TimeoutPolicy | None = None):
        if mode not in ("dense", "binary"):
            raise ValueError(f"reward mode must be dense or binary, not {mode!r}")
        self.tasks = dict(tasks) if isinstance(tasks, dict) else {t.id: t for t in tasks}
        self.mode = mode
        self.workers = workers
        self.limits = limits
        self.timeouts = timeouts
        self.__name__ = f"coverage_{mode}"
        self.calls: list[dict] = []
        # Compile every design in the background while the trainer loads the model and
        # generates the first rollouts: cold Verilator builds (seconds each) then stay off
        # the reward's critical path (score_many waits on a build still in progress).
        designs = {t.design_hash(): t for t in self.tasks.values()}
        builds = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chorus-prebuild")
        self.prebuilds = [builds.submit(prebuild, task, None, limits, timeouts) for task in designs.values()]
        builds.shutdown(wait=False)

    def __call__(self, completions, task_id, log_metric=None, trainer_state=None, **kwargs) -> list[float]:
        start = time.perf_counter()
        items = [(self.tasks[t], extract_stimulus(completion_text(c))) for c, t in zip(completions, task_id)]
        results = score_many(items, workers=self.workers, limits=self.limits, timeouts=self.timeouts)
        rewards = [float(r.score) if self.mode == "dense" else float(r.passed) for r in results]
        statuses: dict[str, int] = {}
        for r in results:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        call = {
            "step": getattr(trainer_state, "global_step", None),
            "wall_s": time.perf_counter() - start,
            "n": len(rewards),
            "mean_reward": sum(rewards) / len(rewards) if rewards else 0.0,
            "max_reward": max(rewards, default=0.0),
            "mean_coverage": sum(r.score for r in results) / len(results) if results else 0.0,
            "passed": sum(bool(r.passed) for r in results),
            "statuses": statuses,
            "sim_s": sum(r.sim_time_s for r in results),
        }
        self.calls.append(call)
        log.info("reward %s: %s", self.__name__, json.dumps(call))
        if log_metric is not None:
            log_metric("sim/wall_s", call["wall_s"])
            log_metric("sim/pass_rate", call["passed"] / max(call["n"], 1))
            log_metric("sim/mean_coverage", call["mean_coverage"])
        return rewards


def format_reward(completions, **kwargs) -> list[float]:
    """1 when the completion holds a fenced python block that compiles and uses cocotb,
    else 0 (weighted by `format_weight` in the total reward)."""
    rewards = []
    for completion in completions:
        text = completion_text(completion)
        code = extract_stimulus(text)
        try:
            compile(code, "stimulus.py", "exec")
            ok = "```" in text and "cocotb" in code
        except (SyntaxError, ValueError):
            ok = False
        rewards.append(float(ok))
    return rewards
