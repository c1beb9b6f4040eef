"""Dense-reward RL experts with TRL's GRPOTrainer.

The rewards (chorus.reward): the coverage a completion reaches in simulation with the
task's design, or, for the ablation, the binary pass; and a small term for the answer
format. The work folder, resume, precision and finalize are chorus.training's, shared
with SFT; `train_expert_job` is the workflow's entry point (scripts/rl.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from chorus.generate import SAMPLERS
from chorus.harness import SandboxLimits
from chorus.harness.timeouts import TimeoutPolicy, sandbox_settings
from chorus.prompts import build_prompt
from chorus.reward import CoverageReward, format_reward
from chorus.tasks import Task, load_manifest
from chorus.training import common_args, finalize, load_trainee, precision_flags, prepare_work_dir, stage_callback

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


ROLLOUT_BACKENDS = SAMPLERS  # rollouts come from the same samplers as evaluation


def resolve_rollout_backend(backend: str = "auto", on_gpu: bool = False, deepspeed: bool = False) -> str:
    """The backend `auto` stands for: the evaluation sampler's choice (generate.resolve_sampler:
    vllm, else the static decoder on a GPU, generate on CPU), but continuous batching under
    DeepSpeed, whose sharded weights the static decoder cannot use."""
    from chorus.generate import resolve_sampler

    if backend not in ROLLOUT_BACKENDS:
        raise ValueError(f"rollout backend must be one of {ROLLOUT_BACKENDS}, not {backend!r}")
    chosen = resolve_sampler(backend, "cuda" if on_gpu else "cpu")
    return "continuous" if backend == "auto" and chosen == "static" and deepspeed else chosen


def rollout_settings(backend: str = "auto", on_gpu: bool = False, vllm_memory: float = 0.3) -> dict:
    """GRPOConfig fields of the rollout backend (config `rl.rollout_backend`): `vllm`: TRL's
    vLLM colocate mode (vLLM shares the training GPU, `vllm_memory` of its memory); `continuous`:
    transformers' continuous batching (`generate_batch`: paged cache, CUDA graphs);
    `generate`: plain `generate`; `static`: plain settings, the trainer's rollouts then go
    through chorus.generate.StaticDecoder (static_rollouts). `auto`: resolve_rollout_backend."""
    backend = resolve_rollout_backend(backend, on_gpu)
    if backend == "vllm":
        return {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": vllm_memory}
    return {"use_vllm": False, "use_transformers_continuous_batching": backend == "continuous"}


def start_rewards_early(trainer, coverage: CoverageReward):
    """Simulate each rollout as soon as it is decoded instead of after the whole batch:
    wraps the trainer's `_generate` (which knows each row's prompt, hence its task) to
    start every completion's simulation as generation returns, so they overlap the
    log-prob passes before TRL calls the rewards; returns an `on_finished(row, ids)` for
    a sampler that reports rows as they stop (StaticDecoder), whose simulations then
    overlap the decoding of the longer rows. The rewards are unchanged: the reward call
    takes the started simulations' results and simulates the rest."""
    prompt_task = {json.dumps(row["prompt"], sort_keys=True): row["task_id"] for row in trainer.train_dataset}
    tokenizer = trainer.processing_class
    batch_tasks: list[str | None] = []
    generate = trainer._generate

    def generate_and_start(prompts):
        batch_tasks[:] = [prompt_task.get(json.dumps(p, sort_keys=True)) for p in prompts]
        output = generate(prompts)
        for task_id, completion in zip(batch_tasks, output[3]):  # TRL's decoded completions
            if task_id is not None:
                coverage.start(task_id, completion)
        return output

    def on_finished(row: int, ids: list[int]) -> None:
        if row < len(batch_tasks) and batch_tasks[row] is not None:  # TRL decodes the same way
            coverage.start(batch_tasks[row], tokenizer.decode(ids, skip_special_tokens=True))

    trainer._generate = generate_and_start
    return on_finished


def static_rollouts(trainer, on_finished=None, compile: bool = False, slots: int | None = None):
    """Replace the trainer's rollout hook (TRL's `_generate_single_turn`, on the instance)
    by chorus.generate.StaticDecoder: static KV cache, decode step replayed from a CUDA
    graph. Same contract as TRL's plain `generate` path: completion ids up to and
    including the first EOS, no log-probs. Sampling follows the trainer's temperature and
    top_p (top_k, min_p and repetition penalty are not applied). One process per model copy
    (DDP ranks are fine; not DeepSpeed ZeRO-3, whose weights are sharded). `on_finished`:
    StaticDecoder's hook for rows that stop early (start_rewards_early); `compile`:
    StaticDecoder's (decode steps through torch.compile); `slots`: rows decoded at once
    (StaticDecoder.generate's; None: the whole rollout batch). Returns the decoders, one
    per model copy, made as rollouts need them."""
    import torch

    from chorus.generate import StaticDecoder

    tokenizer = trainer._tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else trainer.eos_token_ids[0]
    decoders: dict = {}  # one per model: its compiled step serves every rollout batch

    def generate(prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        model = trainer.accelerator.unwrap_model(trainer.model)
        if id(model) not in decoders:
            decoders[id(model)] = StaticDecoder(model, compile=compile)
        decoder = decoders[id(model)]
        width = max(len(ids) for ids in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for row, ids in enumerate(prompt_ids):  # left padding
            input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
            mask[row, width - len(ids):] = 1
        was_training = model.training
        model.eval()
        try:
            tokens, lengths = decoder.generate(
                input_ids, mask, max_new_tokens=trainer.max_completion_length, temperature=trainer.temperature,
                top_p=trainer.top_p, stop_ids=list(trainer.eos_token_ids), pad_id=pad_id,
                on_finished=on_finished, slots=slots)
        finally:
            model.train(was_training)
        return [row[: int(n)].tolist() for row, n in zip(tokens, lengths)], None

    trainer._generate_single_turn = generate
    return decoders


class RolloutTimer:
    """Times the trainer's rollouts (TRL's `_generate_single_turn`, wrapped on the instance)
    and its optimizer steps, for the breakdown of a GRPO step: generation, reward wait, and
    the rest (log-probs, backward, optimizer)."""

    def __init__(self):
        self.batches: list[dict] = []  # per rollout batch: seconds, tokens (the first carries the decoder's compile)
        self.step_s: list[float] = []

    @property
    def generation_s(self) -> float:
        return sum(b["s"] for b in self.batches)

    @property
    def rollout_tokens(self) -> int:
        return sum(b["tokens"] for b in self.batches)

    @property
    def rollouts(self) -> int:
        return sum(b["rows"] for b in self.batches)

    def tokens_per_s(self, skip: int = 0) -> float | None:
        """Rollout tokens per second of generation, over the batches after the first `skip`."""
        seconds = sum(b["s"] for b in self.batches[skip:])
        return sum(b["tokens"] for b in self.batches[skip:]) / seconds if seconds else None

    def wrap(self, trainer) -> None:
        generate = getattr(trainer, "_generate_single_turn", None)
        if generate is None:  # a TRL without this hook: no generation timing
            return

        def timed(*args, **kwargs):
            start = time.perf_counter()
            completion_ids, logprobs = generate(*args, **kwargs)
            self.batches.append({"s": time.perf_counter() - start, "tokens": sum(len(ids) for ids in completion_ids),
                                 "rows": len(completion_ids)})
            return completion_ids, logprobs

        trainer._generate_single_turn = timed

    def callback(self):
        from transformers import TrainerCallback

        timer = self

        class StepTimer(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                self.start = time.perf_counter()

            def on_step_end(self, args, state, control, **kwargs):
                timer.step_s.append(time.perf_counter() - self.start)

        return StepTimer()


def train_expert(
    model_in: str | Path,
    tasks: list[Task],
    out_dir: str | Path,
    *,
    reward: str = "dense",
    format_weight: float = 0.1,
    num_generations: int = 4,
    max_completion_length: int = 256,
    steps: int | None = 10,
    epochs: float = 1.0,
    lr: float = 1e-5,
    beta: float = 0.0,
    temperature: float = 1.0,
    batch_size: int = 4,
    grad_accum: int = 1,
    steps_per_generation: int | None = None,
    seed: int = 0,
    sim_workers: int | None = None,
    sim_limits: SandboxLimits | None = None,
    bf16: bool | None = None,
    use_cpu: bool | None = None,
    device: str | None = None,
    deepspeed_config: str | None = None,
    resume: bool = True,
    save_steps: int = 50,
    gradient_checkpointing: bool = False,
    rollout_backend: str = "auto",
    sim_timeouts: TimeoutPolicy | None = None,
    early_rewards: bool = True,
    rollout_compile: bool = False,
    rollout_slots: int | None = None,
    extra_args: dict | None = None,
) -> dict:
    """GRPO from `model_in` on `tasks`; the expert lands in `out_dir` atomically with
    `rl_metrics.json`. Rewards: the coverage reward (`reward`: dense | binary, weight 1)
    and `format_reward` (weight `format_weight`), separate so TRL logs both. `steps`
    optimizer steps (None: `epochs` passes over the tasks); `batch_size` completions per
    device and step, rounded to whole groups of `num_generations`; `steps_per_generation`
    (TRL's, None: `grad_accum`): rollouts are sampled that many steps' batches at a time,
    the larger batch a small model needs to decode fast on a GPU (the later steps of a
    batch learn slightly off-policy, within TRL's clipped ratio). `rollout_backend`: see
    rollout_settings; `sim_timeouts`: per-task simulation limits (chorus.harness.timeouts);
    `early_rewards`: simulate each rollout as soon as it is decoded (start_rewards_early);
    `rollout_compile`: the static backend's decode steps compiled (StaticDecoder `compile`);
    `rollout_slots`: its rows decoded at once (None: the whole rollout batch; fewer: a row
    that ends gives its slot to the next).
    The metrics break the run down into generation, reward wait and the rest (log-probs,
    backward, optimizer), with rollout tokens/s and simulations/s. `extra_args` go to
    GRPOConfig as they are."""
    from trl import GRPOConfig, GRPOTrainer

    from chorus.modeling import load_tokenizer

    if not tasks:
        raise ValueError("RL needs at least one task")
    work_dir, resume_from = prepare_work_dir(out_dir, resume)
    tokenizer = load_tokenizer(model_in)
    flags = precision_flags(device, bf16=bf16, use_cpu=use_cpu)
    model = load_trainee(model_in, flags)
    coverage = CoverageReward(tasks, reward, sim_workers, sim_limits, sim_timeouts)
    # the generation batch must hold whole groups of num_generations completions
    batch = max(batch_size, num_generations)
    batch -= batch % num_generations
    rollout_backend = resolve_rollout_backend(
        rollout_backend, on_gpu=not flags["use_cpu"], deepspeed=bool(deepspeed_config)
    )
    if rollout_backend == "static" and deepspeed_config:
        raise ValueError("rollout_backend static needs whole weights in each process: not with DeepSpeed")
    rollout = rollout_settings(rollout_backend)
    if rollout.get("use_transformers_continuous_batching") and flags["use_cpu"]:
        from chorus.generate import continuous_batching_kwargs
        from chorus.prompts import render_prompt

        longest = max(len(tokenizer(render_prompt(tokenizer, build_prompt(t)), add_special_tokens=False)["input_ids"])
                      for t in tasks)
        rollout["transformers_continuous_batching_config"] = continuous_batching_kwargs(
            "cpu", longest, max_completion_length, batch * (steps_per_generation or grad_accum))
    config = dict(
        **common_args(work_dir, flags, save_steps=save_steps, seed=seed, deepspeed_config=deepspeed_config,
                      gradient_checkpointing=gradient_checkpointing),
        max_steps=steps if steps else -1,
        num_train_epochs=epochs,
        learning_rate=lr,
        beta=beta,
        temperature=temperature,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=grad_accum,
        steps_per_generation=steps_per_generation,
        reward_weights=[1.0, format_weight],
        **rollout,
    )
    args = GRPOConfig(**{**config, **(extra_args or {})})
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[coverage, format_reward],
        args=args,
        train_dataset=rl_dataset(tasks, min_rows=args.generation_batch_size // num_generations),
        processing_class=tokenizer,
        callbacks=[stage_callback()],
    )
    on_finished = start_rewards_early(trainer, coverage) if early_rewards else None
    decoders = (static_rollouts(trainer, on_finished, compile=rollout_compile, slots=rollout_slots)
                if rollout_backend == "static" else {})
    timer = RolloutTimer()
    timer.wrap(trainer)
    trainer.add_callback(timer.callback())
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume_from)
    runtime = time.perf_counter() - start
    if trainer.state.global_step == 0:  # e.g. a rollout batch TRL could not fill: not an expert
        raise RuntimeError(f"GRPO trained no step ({len(tasks)} tasks, rollout batch {args.generation_batch_size})")
    reward_wall = sum(c["wall_s"] for c in coverage.calls)  # the wait: simulations started early are off it
    simulating_s = sum(c["simulating_s"] for c in coverage.calls)
    steps_s = sum(timer.step_s)
    metrics = {
        "model_in": str(model_in),
        "tasks": [t.id for t in tasks],
        "steps": trainer.state.global_step,
        "reward_mode": reward,
        "format_weight": format_weight,
        "runtime_s": runtime,
        "reward_wall_s": reward_wall,
        "reward_time_fraction": reward_wall / runtime if runtime else None,
        "rollout_backend": rollout_backend,
        # compiled decode steps in effect (a failed compile falls back to uncompiled ones)
        "rollout_compile": bool(decoders) and all(decoder.compiled for decoder in decoders.values()),
        "rollout_slots": rollout_slots if rollout_backend == "static" else None,
        "breakdown": {
            "steps_s": steps_s,
            "generation_s": timer.generation_s,
            "reward_wait_s": reward_wall,
            # log-probs, loss, backward and optimizer: the step minus rollout and rewards
            "train_other_s": max(steps_s - timer.generation_s - reward_wall, 0.0),
            "reward_wait_fraction": reward_wall / steps_s if steps_s else None,
            "rollouts": timer.rollouts,
            "rollout_tokens": timer.rollout_tokens,
            "rollout_tokens_per_s": timer.tokens_per_s(),
            "rollout_batches": timer.batches,
            # steady state: the batches after the first, which holds one-off costs (compiles)
            "rollout_tokens_per_s_after_first": timer.tokens_per_s(skip=1),
            "simulations": sum(c["n"] for c in coverage.calls),
            "simulations_started_early": sum(c["started_early"] for c in coverage.calls),
            "simulations_per_s": (sum(c["n"] for c in coverage.calls) / simulating_s if simulating_s else None),
        },
        "rewards_per_step": reward_log(trainer.state.log_history),
        "reward_calls": coverage.calls,
        "log_history": trainer.state.log_history,
        "bf16": flags["bf16"],
        "world_size": trainer.args.world_size,
        "deepspeed": deepspeed_config,
        "resumed_from": resume_from,
    }
    finalize(trainer, out_dir, work_dir, "rl_metrics.json", metrics)
    return metrics


def train_expert_job(
    model_in: str,
    manifest: str,
    out_dir: str,
    expert: dict,
    simulation: dict,
    job_cpus: int,
    device: str | None = None,
    deepspeed_config: str | None = None,
) -> dict:
    """One workflow RL job (JSON-able arguments, so chorus.launch can start it per rank):
    the expert's tasks from the manifest (its `splits`, optional `difficulties`), its GRPO
    settings (config `rl`, merged by Plan.expert) and the sandbox limits of config
    `simulation`. The job's CPUs are shared by the ranks' reward sandboxes."""
    tasks = load_manifest(manifest, splits=expert["splits"])
    if expert["difficulties"]:
        tasks = [t for t in tasks if t.difficulty in expert["difficulties"]]
    ranks = int(os.environ.get("WORLD_SIZE", "1"))
    sim_limits, sim_timeouts = sandbox_settings(simulation)
    return train_expert(
        model_in,
        tasks,
        out_dir,
        reward=expert["reward"],
        format_weight=expert["format_weight"],
        num_generations=expert["num_generations"],
        max_completion_length=expert["max_completion_length"],
        steps=expert["steps"],
        lr=expert["lr"],
        beta=expert["beta"],
        temperature=expert["temperature"],
        batch_size=expert["batch_size"],
        steps_per_generation=expert["steps_per_generation"],
        seed=expert["seed"],
        save_steps=expert["save_steps"],
        sim_workers=max(1, job_cpus // ranks),
        sim_limits=sim_limits,
        sim_timeouts=sim_timeouts,
        rollout_backend=expert["rollout_backend"],
        device=device,
        deepspeed_config=deepspeed_config,
    )
