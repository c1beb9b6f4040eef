"""GRPO's rollouts through chorus's own samplers, and their timing: the one module that
leans on TRL's private hooks.

GRPOTrainer has no public interface for its rollouts; this module replaces or wraps, on
the trainer instance, `_generate_single_turn` (one rollout batch: the static decoder,
the timer) and `_generate` (the decoded batch: rewards started early), and reads the
trainer's `_tokenizer`, `eos_token_ids`, `max_completion_length`, `temperature` and
`top_p`. A TRL upgrade is checked here (tests/test_rl_speed.py runs every hook on CPU).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from chorus.generate import SAMPLERS

if TYPE_CHECKING:
    from chorus.reward import CoverageReward

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
