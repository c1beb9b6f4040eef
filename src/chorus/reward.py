"""GRPO reward functions (TRL's `reward(completions, **columns) -> list[float]`).

The coverage reward of a completion is the coverage it reaches when simulated with the
task's design (`SimResult.score`, defined once by `chorus.harness.verdict.dense_score`;
0 for an answer whose run did not end normally), or, for the ablation, the binary pass.
The format reward checks the answer format (a python block that compiles). Rollout
completions of one step are simulated in parallel sandboxes.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor

from chorus.harness import SandboxLimits, prebuild, score
from chorus.harness.score import default_workers
from chorus.harness.timeouts import TimeoutPolicy
from chorus.prompts import extract_stimulus
from chorus.tasks import Task

log = logging.getLogger(__name__)


def completion_text(completion) -> str:
    """TRL passes conversational completions as message lists, plain ones as strings."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion)
    return completion


def coverage_reward(result, mode: str) -> float:
    """The RL reward of one verdict: dense, `SimResult.score` (harness.verdict: the
    replayed coverage relative to the target, 0 for a run that did not end normally, so a
    broken or cut-off answer ranks below a weak one); binary, 1 when it passed."""
    return float(result.passed) if mode == "binary" else float(result.score)


class CoverageReward:
    """TRL reward function: `reward(completions, task_id, **kw) -> list[float]`.

    Each completion's stimulus (`extract_stimulus`) is simulated against its task's
    design by `chorus.harness.score_many` (`workers` sandboxes at once) and rewarded by
    `coverage_reward` (mode "dense" or "binary"). `tasks`: a {task_id: Task} mapping or
    a list of tasks. Every call is recorded in `calls` (wall time, reward statistics,
    status counts) and, under GRPOTrainer, logged through its `log_metric` hook.
    `timeouts`: per-task simulation limits from the reference's measured time
    (chorus.harness.timeouts), measured during the background prebuild.

    Simulations may start before the reward call: `start(task_id, completion)` begins one
    as soon as its completion is decoded (rl.early_scoring), in the same pool of `workers`
    sandboxes; the call then simulates only what was not started and waits for the rest.
    Rewards are the same either way (one simulator seed per candidate).
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
        self._builds = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chorus-prebuild")
        self.prebuilds = [self._builds.submit(prebuild, task, None, limits, timeouts) for task in designs.values()]
        self._pool: ThreadPoolExecutor | None = None
        self._started: dict[tuple[str, str], Future] = {}
        self._started_at: float | None = None

    def close(self) -> None:
        """Drop the prebuilds not started yet and let the sandboxes' threads go: without
        it, the interpreter's exit waits for every queued build (minutes for a large task
        set) after training is over."""
        self._builds.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _simulate(self, task_id: str, text: str) -> Future:
        if self._pool is None:  # sandboxes are child processes: threads only wait on them
            self._pool = ThreadPoolExecutor(max_workers=self.workers or default_workers(),
                                            thread_name_prefix="chorus-reward")
        stimulus = extract_stimulus(text)
        return self._pool.submit(score, self.tasks[task_id], stimulus, limits=self.limits, timeouts=self.timeouts)

    def start(self, task_id: str, completion) -> Future | None:
        """Begin simulating `completion` of task `task_id` now, ahead of the reward call;
        its SimResult to come (None for a task this reward does not know). The reward call
        takes the result instead of simulating the completion again."""
        key = (task_id, completion_text(completion))
        if task_id in self.tasks and key not in self._started:
            self._started_at = self._started_at or time.perf_counter()
            self._started[key] = self._simulate(*key)
        return self._started.get(key)

    def __call__(self, completions, task_id, log_metric=None, trainer_state=None, **kwargs) -> list[float]:
        start = time.perf_counter()
        keys = [(t, completion_text(c)) for c, t in zip(completions, task_id)]
        early = sum(key in self._started for key in set(keys))
        for key in keys:
            if key not in self._started:
                self._started[key] = self._simulate(*key)
        results = [self._started[key].result() for key in keys]
        busy_s = time.perf_counter() - (self._started_at or start)
        for future in self._started.values():  # started for completions this call did not get
            future.cancel()
        self._started, self._started_at = {}, None
        rewards = [coverage_reward(r, self.mode) for r in results]
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
            # distinct candidates whose simulation started before the call, and the time
            # from the first simulation's start to the last result
            "started_early": early,
            "simulating_s": busy_s,
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
