"""GRPO reward functions (TRL's `reward(completions, **columns) -> list[float]`).

The coverage reward of a completion is the coverage it reaches when simulated with the
task's design (`SimResult.score`, defined once by `chorus.harness.verdict.dense_score`;
0 for an answer whose run did not end normally), or, for the ablation, the binary pass.
The format reward checks the answer format (a python block that compiles). Rollout
completions of one step are simulated in parallel sandboxes, each distinct answer once.
"""

from __future__ import annotations

import json
import logging
import time
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from chorus.harness import SandboxLimits, SimResult, prebuild, score
from chorus.harness.score import default_workers, simulation_key, task_fingerprint
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


# Verdicts a simulation of the same text with the same settings gives again: reused
# across reward calls. A timeout, memory, harness or build failure can come from the
# machine's load or state, so it is shared only by the copies of one call.
REUSED_STATUSES = ("ok", "below_target", "syntax_error", "runtime_error", "output_limit")


class CoverageReward:
    """TRL reward function: `reward(completions, task_id, **kw) -> list[float]`.

    Each completion's stimulus (`extract_stimulus`) is simulated against its task's
    design by `chorus.harness.score` (`workers` sandboxes at once) and rewarded by
    `coverage_reward` (mode "dense" or "binary"). `tasks`: a {task_id: Task} mapping or
    a list of tasks. Every call is recorded in `calls` (wall time, reward statistics,
    status counts, simulations run) and, under GRPOTrainer, logged through its
    `log_metric` hook. `timeouts`: per-task simulation limits from the reference's
    measured time (chorus.harness.timeouts), measured during the background prebuild.

    Identical answers are simulated once: completions with the same `simulation_key`
    (task, exact stimulus text, seed, settings) share one simulation within a call, and
    a verdict of a REUSED_STATUSES kind is reused by the calls of the next `reuse_calls`
    calls (0: within a call only; docs/harness.md, "Scoring an answer once").

    Simulations may start before the reward call: `start(task_id, completion)` begins one
    as soon as its completion is decoded (rl.early_scoring), in the same pool of `workers`
    sandboxes; the call then simulates only what was not started and waits for the rest
    (a copy of a simulation in flight waits for it). Rewards are the same either way (one
    simulator seed for every candidate).
    """

    def __init__(self, tasks: dict[str, Task] | list[Task], mode: str = "dense",
                 workers: int | None = None, limits: SandboxLimits | None = None,
                 timeouts: TimeoutPolicy | None = None, reuse_calls: int = 16):
        if mode not in ("dense", "binary"):
            raise ValueError(f"reward mode must be dense or binary, not {mode!r}")
        self.tasks = dict(tasks) if isinstance(tasks, dict) else {t.id: t for t in tasks}
        self.mode = mode
        self.workers = workers
        self.limits = limits
        self.timeouts = timeouts
        self.reuse_calls = reuse_calls
        self.__name__ = f"coverage_{mode}"
        self.calls: list[dict] = []
        # Compile every design in the background while the trainer loads the model and
        # generates the first rollouts: cold Verilator builds (seconds each) then stay off
        # the reward's critical path (score_many waits on a build still in progress).
        designs = {t.design_hash(): t for t in self.tasks.values()}
        self._builds = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chorus-prebuild")
        self.prebuilds = [self._builds.submit(prebuild, task, None, limits, timeouts) for task in designs.values()]
        self._pool: ThreadPoolExecutor | None = None
        self._task_keys: dict[str, str] = {}  # task id -> task_fingerprint (reads the RTL once)
        self._started: dict[str, Future] = {}  # simulation key -> its result to come, this call
        self._reused: set[str] = set()  # keys of _started answered by an earlier call's verdict
        self._started_at: float | None = None
        self._earlier = EarlierVerdicts()

    def close(self) -> None:
        """Drop the prebuilds not started yet and let the sandboxes' threads go: without
        it, the interpreter's exit waits for every queued build (minutes for a large task
        set) after training is over."""
        self._builds.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def key(self, task_id: str, completion) -> str:
        """The simulation key of `completion` for task `task_id` (harness.score.simulation_key):
        what is simulated is the extracted stimulus, so prose around it does not count."""
        return self._stimulus_key(task_id, extract_stimulus(completion_text(completion)))

    def _stimulus_key(self, task_id: str, stimulus: str) -> str:
        if task_id not in self._task_keys:
            self._task_keys[task_id] = task_fingerprint(self.tasks[task_id])
        return simulation_key(self._task_keys[task_id], stimulus, limits=self.limits, timeouts=self.timeouts)

    def _result(self, task_id: str, completion) -> tuple[str, bool]:
        """The key of `completion` with its result to come in `_started`: the simulation
        of a copy already started, an earlier call's verdict, or a new simulation (then
        True)."""
        stimulus = extract_stimulus(completion_text(completion))
        key = self._stimulus_key(task_id, stimulus)
        if key in self._started:
            return key, False
        verdict = self._earlier.get(key)
        if verdict is not None:
            self._started[key] = Future()
            self._started[key].set_result(verdict)
            self._reused.add(key)
            return key, False
        if self._pool is None:  # sandboxes are child processes: threads only wait on them
            self._pool = ThreadPoolExecutor(max_workers=self.workers or default_workers(),
                                            thread_name_prefix="chorus-reward")
        self._started[key] = self._pool.submit(score, self.tasks[task_id], stimulus, limits=self.limits,
                                               timeouts=self.timeouts)
        return key, True

    def start(self, task_id: str, completion) -> Future | None:
        """Begin simulating `completion` of task `task_id` now, ahead of the reward call;
        its SimResult to come (None for a task this reward does not know). The reward call
        takes the result instead of simulating the completion again."""
        if task_id not in self.tasks:
            return None
        key, new = self._result(task_id, completion)
        if new:
            self._started_at = self._started_at or time.perf_counter()
        return self._started[key]

    def __call__(self, completions, task_id, log_metric=None, trainer_state=None, **kwargs) -> list[float]:
        start = time.perf_counter()
        before = set(self._started)
        keys = [self._result(t, c)[0] for c, t in zip(completions, task_id)]
        results = [self._started[key].result() for key in keys]
        busy_s = time.perf_counter() - (self._started_at or start)
        reused = set(keys) & self._reused
        simulated = set(keys) - reused
        sim_s = sum(self._started[key].result().sim_time_s for key in simulated)
        self._earlier.keep(self._started, self._reused, len(self.calls), self.reuse_calls)
        for future in self._started.values():  # started for completions this call did not get
            future.cancel()
        self._started, self._reused, self._started_at = {}, set(), None
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
            # simulations run for this call's completions (started early or in the call);
            # the completions that took another's verdict (a copy in this call, or an
            # earlier call's verdict: `reused` distinct answers); the simulations' seconds
            "simulated": len(simulated),
            "duplicates": len(keys) - len(simulated),
            "reused": len(reused),
            "sim_s": sim_s,
            # distinct candidates whose simulation started before the call, and the time
            # from the first simulation's start to the last result
            "started_early": len(simulated & before),
            "simulating_s": busy_s,
        }
        self.calls.append(call)
        log.info("reward %s: %s", self.__name__, json.dumps(call))
        if log_metric is not None:
            log_metric("sim/wall_s", call["wall_s"])
            log_metric("sim/pass_rate", call["passed"] / max(call["n"], 1))
            log_metric("sim/mean_coverage", call["mean_coverage"])
            log_metric("sim/simulated", call["simulated"])
        return rewards


class EarlierVerdicts:
    """Verdicts of earlier reward calls by simulation key, for CoverageReward: each is
    reused for the `reuse_calls` calls after the one that simulated it, then dropped, so
    the memory is bounded and an answer whose outcome is left to chance is drawn again.
    Run 2's coverage.dat (the feedback of coverage-closure rounds) is kept compressed."""

    def __init__(self):
        self._verdicts: dict[str, tuple[int, SimResult, bytes | None]] = {}

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: str) -> SimResult | None:
        """A fresh copy of the verdict of `key`, None when there is none."""
        if key not in self._verdicts:
            return None
        _, result, coverage_dat = self._verdicts[key]
        text = zlib.decompress(coverage_dat).decode("utf-8", "surrogatepass") if coverage_dat is not None else None
        return replace(result, coverage_dat=text)

    def keep(self, started: dict[str, Future], reused: set[str], call: int, reuse_calls: int) -> None:
        """Keep the verdicts of call number `call`'s finished simulations (`started` less
        the `reused` ones) whose status is a REUSED_STATUSES kind; drop those made
        `reuse_calls` calls ago."""
        for key, future in started.items():
            if reuse_calls <= 0 or key in reused or not future.done() or future.cancelled() or future.exception():
                continue
            result = future.result()
            if result.status in REUSED_STATUSES:
                coverage_dat = result.coverage_dat
                packed = zlib.compress(coverage_dat.encode("utf-8", "surrogatepass")) if coverage_dat else None
                self._verdicts[key] = (call, replace(result, coverage_dat=None), packed)
        for key in [k for k, (made, _, _) in self._verdicts.items() if call - made >= reuse_calls]:
            del self._verdicts[key]


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
