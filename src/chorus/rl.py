"""Dense-reward RL experts with TRL's GRPOTrainer.

The rewards (chorus.reward): the coverage a completion reaches in simulation with the
task's design, or, for the ablation, the binary pass; and a small term for the answer
format. The expert's settings are one GRPOExpert (chorus.settings); its rollouts go
through chorus.rollouts. The work folder, resume, precision and finalize are
chorus.training's, shared with SFT. The workflow's rl rule (scripts/rl.py) starts
`train_expert` on every rank (chorus.launch) with the job's GRPOExpert
(GRPOExpert.from_job) and its `expert_tasks`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from chorus.harness import SandboxLimits
from chorus.harness.timeouts import TimeoutPolicy
from chorus.prompts import build_prompt
from chorus.reward import CoverageReward, format_reward
from chorus.rollouts import (
    RolloutTimer,
    RoundEpisodes,
    final_answer_reward,
    gpu_allocated_gib,
    prompt_tasks,
    resolve_rollout_backend,
    rollout_settings,
    start_rewards_early,
    static_rollouts,
)
from chorus.settings import GRPOExpert
from chorus.tasks import Task, load_manifest
from chorus.training import (common_args, finalize, load_trainee, precision_flags, prepare_work_dir,
                             rank_zero_decides, stage_callback, world_size)

log = logging.getLogger(__name__)


def rl_dataset(tasks: list[Task], min_rows: int = 1):
    """GRPO prompts: {prompt: conversational messages, task_id} per task, the list repeated
    whole until it has `min_rows` rows. TRL draws the distinct prompts of a rollout batch
    without replacement and trains no step at all when the dataset holds fewer, so a
    rollout batch larger than the task list needs a task more than once (its groups are
    normalized separately)."""
    from datasets import Dataset

    rows = [{"prompt": build_prompt(t), "task_id": t.id} for t in tasks]
    return Dataset.from_list(rows * max(1, -(-min_rows // len(rows))))


def reward_log(log_history: list[dict]) -> list[dict]:
    """Per logged step: the total reward, its std and every reward term's mean."""
    rows = []
    for entry in log_history:
        if "reward" not in entry:
            continue
        rows.append({k: v for k, v in entry.items()
                     if k in ("step", "reward", "reward_std", "loss", "kl", "frac_reward_zero_std")
                     or k.startswith(("rewards/", "sim/"))})
    return rows


def train_expert(
    model_in: str | Path,
    tasks: list[Task],
    out_dir: str | Path,
    expert: GRPOExpert,
    *,
    sim_workers: int | None = None,
    sim_limits: SandboxLimits | None = None,
    sim_timeouts: TimeoutPolicy | None = None,
    bf16: bool | None = None,
    use_cpu: bool | None = None,
    device: str | None = None,
    deepspeed_config: str | None = None,
    resume: bool = True,
    extra_args: dict | None = None,
) -> dict:
    """GRPO from `model_in` on `tasks` with the settings of `expert`; the expert lands in
    `out_dir` atomically with `rl_metrics.json`. Rewards: the coverage reward
    (`expert.reward`: dense | binary, weight 1) and `format_reward` (weight
    `expert.format_weight`), separate so TRL logs both; the reward's simulations run in
    `sim_workers` sandboxes (the job's, shared by its ranks) under `sim_limits` and the
    per-task `sim_timeouts` (chorus.harness.timeouts). `expert.batch_size` completions per
    micro-batch (`grad_accum` a step) are rounded to whole groups of `num_generations`;
    `steps_per_generation` micro-batches are sampled at a time, the larger batch a small
    model needs to decode fast on a GPU (the later steps learn slightly off-policy, within
    TRL's clipped ratio); `time_budget_s` may end it early. Rollouts: chorus.rollouts; the
    metrics split the run into generation, reward wait and the rest. `extra_args`: GRPOConfig's."""
    from trl import GRPOTrainer

    from chorus.modeling import load_tokenizer

    if not tasks:
        raise ValueError("RL needs at least one task")
    work_dir, resume_from = prepare_work_dir(out_dir, resume)
    tokenizer = load_tokenizer(model_in)
    flags = precision_flags(device, bf16=bf16, use_cpu=use_cpu)
    backend = checked_rollout_backend(expert, flags, deepspeed_config)
    args = grpo_config(expert, backend, work_dir, flags, tokenizer, tasks, deepspeed_config, extra_args)
    workers = max(1, sim_workers // world_size()) if sim_workers else None
    coverage = CoverageReward(tasks, expert.reward, workers, sim_limits, sim_timeouts)
    dataset = rl_dataset(tasks, min_rows=args.generation_batch_size // expert.num_generations)
    rewards, episodes = [coverage, format_reward], None
    if (expert.rounds or 1) > 1:  # multi-round episodes, rewarded on their last answer
        episodes = RoundEpisodes(coverage, prompt_tasks(dataset), expert.rounds)
        rewards = [final_answer_reward(reward) for reward in rewards]
    budget = time_budget_callback(expert.time_budget_s, steps_per_rollout_batch(args))
    trainer = GRPOTrainer(model=load_trainee(model_in, flags), reward_funcs=rewards, args=args,
                          train_dataset=dataset, processing_class=tokenizer, callbacks=[stage_callback(), budget],
                          rollout_func=episodes)
    timer, decoders = wire_rollouts(trainer, expert, backend, coverage)
    start = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    finally:
        coverage.close()
    runtime = time.perf_counter() - start
    if trainer.state.global_step == 0:  # e.g. a rollout batch TRL could not fill: not an expert
        raise RuntimeError(f"GRPO trained no step ({len(tasks)} tasks, rollout batch {args.generation_batch_size})")
    metrics = {
        "model_in": str(model_in),
        "tasks": [t.id for t in tasks],
        "steps": trainer.state.global_step,
        "reward_mode": expert.reward,
        "format_weight": expert.format_weight,
        "runtime_s": runtime,
        **run_breakdown(coverage, timer, runtime),
        **rollout_record(expert, backend, decoders, episodes),
        # as the trainer sampled its rollouts (the rollout hooks read the same fields)
        "sampling": {k: getattr(trainer.args, k) for k in ("temperature", "top_p", "max_completion_length")},
        "rewards_per_step": reward_log(trainer.state.log_history),
        "reward_calls": coverage.calls,
        "log_history": trainer.state.log_history,
        "bf16": flags["bf16"],
        "world_size": trainer.args.world_size,
        "deepspeed": deepspeed_config,
        "resumed_from": resume_from,
        "stopped_by_time_budget": budget.stopped,
    }
    finalize(trainer, out_dir, work_dir, "rl_metrics.json", metrics)
    return metrics


def steps_per_rollout_batch(args) -> int:
    """Optimizer steps trained on one rollout batch (TRL counts steps_per_generation in
    micro-batches, grad_accum of them a step)."""
    return max(1, (args.steps_per_generation or args.gradient_accumulation_steps) // args.gradient_accumulation_steps)


def time_budget_callback(budget_s: float | None, steps_per_batch: int, clock=time.perf_counter):
    """Ends training at the end of a rollout batch when one more batch, at the mean pace of
    those this call trained, would pass `budget_s` seconds (a job's or a lease's time; None:
    no limit): the expert is saved and evaluated as usual, with the steps it had time for.
    Never inside a batch, whose rollouts were sampled for all its steps."""
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        stopped = False

        def on_train_begin(self, args, state, control, **kwargs):
            self.start, self.first_step = clock(), state.global_step

        def on_step_end(self, args, state, control, **kwargs):
            batches = (state.global_step - self.first_step) // steps_per_batch
            if budget_s is None or state.global_step % steps_per_batch or not batches:
                return
            elapsed = clock() - self.start
            if rank_zero_decides(elapsed + elapsed / batches > budget_s):  # every rank stops, or none
                control.should_training_stop = self.stopped = True

    return TimeBudget()


def checked_rollout_backend(expert: GRPOExpert, flags: dict, deepspeed_config: str | None) -> str:
    """The rollout backend `expert` gets on this device (chorus.rollouts)."""
    backend = resolve_rollout_backend(expert.rollout_backend, on_gpu=not flags["use_cpu"],
                                      deepspeed=bool(deepspeed_config))
    if backend == "static" and deepspeed_config:
        raise ValueError("rollout_backend static needs whole weights in each process: not with DeepSpeed")
    return backend


def rollout_record(expert: GRPOExpert, backend: str, decoders: dict, episodes) -> dict:
    """How the run's rollouts were made, for its metrics."""
    return {
        "rollout_backend": backend,
        # compiled decode steps in effect (a failed compile falls back to uncompiled ones)
        "rollout_compile": bool(decoders) and all(decoder.compiled for decoder in decoders.values()),
        "rollout_slots": expert.rollout_slots if backend == "static" else None,
        "rounds": expert.rounds or 1,
        "round_episodes": episodes.episodes if episodes is not None else None,
    }


def wire_rollouts(trainer, expert: GRPOExpert, backend: str, coverage: CoverageReward):
    """The trainer's rollouts as `expert` asks (chorus.rollouts): rewards started as rows
    are decoded, the static decoder for backend `static`, and timed. Returns the timer and
    the static decoders (one per model copy; none for other backends)."""
    # a multi-round episode's completion holds every round: nothing to start early
    early = expert.early_rewards and (expert.rounds or 1) == 1
    on_finished = start_rewards_early(trainer, coverage) if early else None
    decoders = (static_rollouts(trainer, on_finished, compile=expert.rollout_compile, slots=expert.rollout_slots)
                if backend == "static" else {})
    timer = RolloutTimer()
    timer.wrap(trainer)
    trainer.add_callback(timer.callback())
    return timer, decoders


def grpo_config(expert: GRPOExpert, backend: str, work_dir: Path, flags: dict, tokenizer, tasks: list[Task],
                deepspeed_config: str | None, extra_args: dict | None):
    """TRL's GRPOConfig of `expert`, its rollouts through `backend` (resolved)."""
    from trl import GRPOConfig

    # the generation batch must hold whole groups of num_generations completions
    batch = max(expert.batch_size, expert.num_generations)
    batch -= batch % expert.num_generations
    rollout = rollout_settings(backend)
    if rollout.get("use_transformers_continuous_batching") and flags["use_cpu"]:
        from chorus.generate import continuous_batching_kwargs
        from chorus.prompts import render_prompt

        longest = max(len(tokenizer(render_prompt(tokenizer, build_prompt(t)), add_special_tokens=False)["input_ids"])
                      for t in tasks)
        rollout["transformers_continuous_batching_config"] = continuous_batching_kwargs(
            "cpu", longest, expert.max_completion_length,
            batch * (expert.steps_per_generation or expert.grad_accum or 1))
    config = dict(
        **common_args(work_dir, flags, save_steps=expert.save_steps, seed=expert.seed,
                      deepspeed_config=deepspeed_config, gradient_checkpointing=expert.gradient_checkpointing),
        max_steps=expert.steps if expert.steps else -1,
        num_train_epochs=expert.epochs,
        learning_rate=expert.lr,
        beta=expert.beta,
        temperature=expert.temperature,
        top_p=1.0 if expert.top_p is None else expert.top_p,
        num_generations=expert.num_generations,
        max_completion_length=expert.max_completion_length,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=expert.grad_accum or 1,
        steps_per_generation=expert.steps_per_generation,
        reward_weights=[1.0, expert.format_weight],
        **rollout,
    )
    return GRPOConfig(**{**config, **(extra_args or {})})


def run_breakdown(coverage: CoverageReward, timer: RolloutTimer, runtime: float) -> dict:
    """The run's time split into generation, reward wait and the rest (log-probs, loss,
    backward, optimizer), with rollout tokens/s and simulations/s."""
    reward_wall = sum(c["wall_s"] for c in coverage.calls)  # the wait: simulations started early are off it
    simulating_s = sum(c["simulating_s"] for c in coverage.calls)
    simulations = sum(c["simulated"] for c in coverage.calls)  # each distinct answer once (CoverageReward)
    steps_s = sum(timer.step_s)
    return {
        "reward_wall_s": reward_wall,
        "reward_time_fraction": reward_wall / runtime if runtime else None,
        "breakdown": {
            "steps_s": steps_s,
            "generation_s": timer.generation_s,
            "reward_wait_s": reward_wall,
            "train_other_s": max(steps_s - timer.generation_s - reward_wall, 0.0),
            "reward_wait_fraction": reward_wall / steps_s if steps_s else None,
            "rollouts": timer.rollouts,
            "rollout_tokens": timer.rollout_tokens,
            "rollout_tokens_per_s": timer.tokens_per_s(),
            "rollout_batches": timer.batches,
            # steady state: the batches after the first, which holds one-off costs (compiles)
            "rollout_tokens_per_s_after_first": timer.tokens_per_s(skip=1),
            "simulations": simulations,
            "duplicates": sum(c["duplicates"] for c in coverage.calls),  # rollouts that took another's verdict
            "simulations_started_early": sum(c["started_early"] for c in coverage.calls),
            "simulations_per_s": simulations / simulating_s if simulating_s else None,
            "peak_gpu_allocated_gib": gpu_allocated_gib(peak=True),
        },
    }


def expert_tasks(manifest: str | Path, expert: GRPOExpert) -> list[Task]:
    """The tasks `expert` trains on: the manifest's tasks of its `splits`, and of its
    `difficulties` when it names any."""
    tasks = load_manifest(manifest, splits=expert.splits)
    return [t for t in tasks if t.difficulty in expert.difficulties] if expert.difficulties else tasks
