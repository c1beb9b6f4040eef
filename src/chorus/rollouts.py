"""GRPO's rollouts through chorus's own samplers, and their timing: the one module that
leans on TRL's private hooks.

GRPOTrainer has no public interface for its rollouts; this module replaces or wraps, on
the trainer instance, `_generate_single_turn` (one rollout batch: the static decoder,
the timer) and `_generate` (the decoded batch: rewards started early), and reads the
trainer's `_tokenizer`, `eos_token_ids`, `max_completion_length`, `temperature` and
`top_p`. A TRL upgrade is checked here (tests/test_rl_speed.py runs every hook on CPU).
Multi-round episodes (rl.rounds, RoundEpisodes) use TRL's public `rollout_func` and
generate through `_generate_single_turn`, as TRL's own tool loop does.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING

from chorus.generate import SAMPLERS
from chorus.harness.feedback import round_feedback

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from chorus.reward import CoverageReward
    from chorus.tasks import Task

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


def prompt_tasks(dataset) -> dict[str, str]:
    """The task id of each prompt of a GRPO dataset (rl.rl_dataset), keyed by the
    prompt's JSON: what TRL hands the rollout hooks is the prompt alone."""
    return {json.dumps(row["prompt"], sort_keys=True): row["task_id"] for row in dataset}


def start_rewards_early(trainer, coverage: CoverageReward):
    """Simulate each rollout as soon as it is decoded instead of after the whole batch:
    wraps the trainer's `_generate` (which knows each row's prompt, hence its task) to
    start every completion's simulation as generation returns, so they overlap the
    log-prob passes before TRL calls the rewards; returns an `on_finished(row, ids)` for
    a sampler that reports rows as they stop (StaticDecoder), whose simulations then
    overlap the decoding of the longer rows. The rewards are unchanged: the reward call
    takes the started simulations' results and simulates the rest."""
    prompt_task = prompt_tasks(trainer.train_dataset)
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


def gpu_allocated_gib(peak: bool = False) -> float | None:
    """The GPU memory PyTorch holds allocated now (or its peak so far), in GiB; None without CUDA."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return (torch.cuda.max_memory_allocated() if peak else torch.cuda.memory_allocated()) / 2**30


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
            held = gpu_allocated_gib()  # what the training step leaves allocated: grows if rollouts leak
            start = time.perf_counter()
            completion_ids, logprobs = generate(*args, **kwargs)
            self.batches.append({"s": time.perf_counter() - start, "tokens": sum(len(ids) for ids in completion_ids),
                                 "rows": len(completion_ids), "gpu_allocated_gib_before": held})
            # logged as it happens too: a run that dies (out of memory) keeps the trend in its log
            log.info("rollout batch %d: %s", len(self.batches), json.dumps(self.batches[-1]))
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


class RoundEpisodes:
    """GRPO episodes of several coverage-closure rounds (rl.rounds, docs/rounds.md),
    through TRL's `rollout_func` (GRPOTrainer's hook for custom multi-turn rollouts): each
    prompt's answer is simulated, and while it has not passed and rounds remain, the
    harness's feedback on it (chorus.harness.feedback) is appended as the user's next
    turn and the model answers again. An episode's completion is every answer with the
    turns between them; the feedback tokens are masked out of the loss (`env_mask`, as
    TRL's own tool loop masks tool output), and the reward is the last answer's: the
    reward functions, wrapped by `final_answer_reward`, read the `final_answer` column.
    Generation goes through the trainer's `_generate_single_turn` like TRL's tool loop
    (so rollout_backend, the static decoder and RolloutTimer apply to every round). An
    answer is simulated by the coverage reward's sandboxes (`CoverageReward.start`), so
    the reward call takes the result of an episode that ended early instead of
    simulating its last answer again.
    `episodes`: per rollout call, the rounds each episode used, its feedback tokens, and per
    round the seconds its answers' simulations (with the feedback) took before the next
    round; each round's generation is a batch of the RolloutTimer's (its rows and seconds)."""

    def __init__(self, coverage: CoverageReward, prompt_task: dict[str, str], rounds: int):
        self.coverage, self.prompt_task, self.rounds = coverage, prompt_task, rounds
        self.tasks: dict[str, Task] = coverage.tasks
        self.episodes: list[dict] = []

    def __call__(self, prompts: list, trainer) -> dict:
        from chorus.prompts import render_prompt

        tokenizer = trainer.processing_class
        task_ids = [self.prompt_task[json.dumps(p, sort_keys=True)] for p in prompts]
        prompt_ids = [tokenizer(render_prompt(tokenizer, p), add_special_tokens=False)["input_ids"] for p in prompts]
        completions = [[] for _ in prompts]
        masks = [[] for _ in prompts]
        answers: list[list[str]] = [[] for _ in prompts]
        feedback: list[list[str]] = [[] for _ in prompts]
        live = list(range(len(prompts)))
        simulation_s: list[float] = []  # per round (its generation: RolloutTimer's batches)
        for number in range(1, self.rounds + 1):
            contexts = [prompt_ids[i] + completions[i] for i in live]
            groups = (trainer.num_generations if trainer.model.training else trainer.num_generations_eval) \
                if number == 1 else 1  # later rounds: each episode has its own history
            new_ids, _ = trainer._generate_single_turn(contexts, None, {}, groups)
            generated = time.perf_counter()
            for i, ids in zip(live, new_ids):
                answers[i].append(tokenizer.decode(ids, skip_special_tokens=True))
            live = self._continue(live, new_ids, number, task_ids, answers, feedback, completions, masks, tokenizer,
                                  trainer.eos_token_ids)
            simulation_s.append(time.perf_counter() - generated)  # ~0 for the last round: the reward simulates it
            if not live:
                break
        self.episodes.append({"rounds_used": [len(a) for a in answers],
                              "feedback_tokens": [len(m) - sum(m) for m in masks], "simulation_s": simulation_s})
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None, "env_mask": masks,
                "final_answer": [a[-1] for a in answers]}

    def _continue(self, live, new_ids, number, task_ids, answers, feedback, completions, masks, tokenizer,
                  stop_ids) -> list[int]:
        """Append this round's answers; the episodes that go on get their feedback turn
        (the answer's trailing stop token then belongs to the turn's closing, masked)."""
        results = self._score([(task_ids[i], answers[i][-1]) for i in live]) if number < self.rounds else None
        going_on = []
        for row, (i, ids) in enumerate(zip(live, new_ids)):
            ids = list(ids)
            if results is None or results[row].passed:
                completions[i] += ids
                masks[i] += [1] * len(ids)
                continue
            while ids and ids[-1] in stop_ids:
                ids.pop()
            feedback[i].append(round_feedback(self.tasks[task_ids[i]], results[row]))
            bridge = tokenizer(self._bridge_text(tokenizer, task_ids[i], answers[i], feedback[i]),
                               add_special_tokens=False)["input_ids"]
            completions[i] += ids + bridge
            masks[i] += [1] * len(ids) + [0] * len(bridge)
            going_on.append(i)
        return going_on

    def _bridge_text(self, tokenizer, task_id: str, answers: list[str], feedback: list[str]) -> str:
        """The text between an answer and the next one: the answer's turn closing, the
        feedback turn and the next generation prompt, as the chat template renders the
        conversation (its rendering with the feedback extends the one without)."""
        from chorus.prompts import render_prompt, round_prompt

        task = self.tasks[task_id]
        before = render_prompt(tokenizer, round_prompt(task, list(zip(answers[:-1], feedback[:-1]))))
        after = render_prompt(tokenizer, round_prompt(task, list(zip(answers, feedback))))
        rest = after[len(before):] if after.startswith(before) else None
        for shown in (answers[-1], answers[-1].strip()):
            if rest is not None and rest.startswith(shown):
                return rest[len(shown):]
        raise ValueError("the chat template does not render a conversation as an extension of its start")

    def _score(self, items: list[tuple[str, str]]):
        """The SimResults of (task id, answer) items, simulated by the coverage reward."""
        started = [self.coverage.start(task_id, answer) for task_id, answer in items]
        return [future.result() for future in started]


def final_answer_reward(reward):
    """`reward` applied to each episode's last answer (the `final_answer` column of
    RoundEpisodes) instead of TRL's whole multi-round completion."""

    def on_final_answer(completions, final_answer=None, **kwargs):
        return reward(final_answer if final_answer is not None else completions, **kwargs)

    on_final_answer.__name__ = getattr(reward, "__name__", type(reward).__name__)
    return on_final_answer
