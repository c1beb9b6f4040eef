"""One SFT stage with TRL's SFTTrainer (prompt-completion data, loss on completions).

A stage trains in `<out_dir>.tmp-train/` (checkpoints `checkpoint-<step>/`), saves the
final model and tokenizer to `<out_dir>.tmp-train/final/` and renames that to `out_dir`,
so `out_dir` only ever exists complete. A killed stage leaves its checkpoints behind and
the next call resumes from the last one (`resume=True`).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import time
from pathlib import Path

from chorus.io import atomic_write_json

log = logging.getLogger(__name__)

WORK_SUFFIX = ".tmp-train"


def work_dir_for(out_dir: str | Path) -> Path:
    """Checkpoints of an unfinished run live beside the output, so a killed job resumes."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + WORK_SUFFIX)


def last_checkpoint(work_dir: str | Path) -> str | None:
    """The newest complete checkpoint in `work_dir`, or None. transformers writes a
    checkpoint in place and its `trainer_state.json` last: a newer folder without it was
    cut short by a kill, and is removed so that no run resumes from half a checkpoint."""
    work_dir = Path(work_dir)
    if not work_dir.is_dir():
        return None
    checkpoints = [p for p in work_dir.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    for checkpoint in sorted(checkpoints, key=lambda p: int(p.name.split("-")[-1]), reverse=True):
        if (checkpoint / "trainer_state.json").is_file():
            return str(checkpoint)
        log.warning("removing incomplete checkpoint %s", checkpoint)
        shutil.rmtree(checkpoint, ignore_errors=True)
    return None


def precision_flags(device: str | None = None, *, bf16: bool | None = None, use_cpu: bool | None = None) -> dict:
    """TrainingArguments `use_cpu` / `bf16`. Unset ones follow `device` (cpu | cuda |
    None = cuda when available): bf16 on a GPU that supports it, float32 on CPU."""
    import torch

    if use_cpu is None:
        use_cpu = device == "cpu" if device else not torch.cuda.is_available()
    if bf16 is None:
        bf16 = not use_cpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return {"bf16": bool(bf16), "use_cpu": bool(use_cpu)}


# Training FLOPs (6 x parameters x tokens) from which `auto` compiles flex_attention +
# Liger: below, the one-off compile (451 s cold for a 1.3B model) costs more than it saves
# (11.7k -> 48.1k tokens/s: 6.5e-5 s per token, so ~7M tokens x 6 x 1.31e9 params).
# benchmarks/rl_loop.py measures the first step both ways; config `sft.compile_min_flops`.
COMPILE_MIN_FLOPS = 5.5e16


def kernel_settings(attn: str = "auto", liger: bool | str = "auto", on_gpu: bool = False,
                    train_flops: float | None = None, compile_min_flops: float | None = COMPILE_MIN_FLOPS) -> dict:
    """Attention and fused kernels for training (config `sft.attention`, `sft.liger_kernel`).
    `flex_attention` (GPU only: it has no CPU backward) trains on padding-free packed
    rows, each example attending only to itself; with Liger's fused kernels it took a
    1.3B model's SFT on one H200 from 13% to 54-59% MFU through the workflow's launcher,
    42% under DeepSpeed ZeRO-2 (benchmarks/README.md). The price: a fresh process spends
    5-8 min in torch.compile before its first step (config `compile_cache` keeps it).
    "auto" (the default) picks them on a GPU (Liger when installed) for jobs whose
    `train_flops` (6 x parameters x tokens; None = unknown) reach `compile_min_flops`
    (None: always), where the compile pays for itself, and `sdpa` on padded rows on CPU
    and for shorter jobs."""
    compiled_pays = on_gpu and (compile_min_flops is None or train_flops is None or train_flops >= compile_min_flops)
    if attn == "auto":
        attn = "flex_attention" if compiled_pays else "sdpa"
    if liger == "auto":
        liger = compiled_pays and importlib.util.find_spec("liger_kernel") is not None
    padding_free = attn in ("flex_attention", "flash_attention_2", "flash_attention_3")
    return {"attn_implementation": attn, "padding_free": padding_free, "use_liger_kernel": bool(liger)}


def report_targets() -> list[str] | str:
    """Where the trainers log metrics: TensorBoard event files (offline, under the
    model's `runs/`) when tensorboard or tensorboardX is installed, else nowhere."""
    available = any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX"))
    return ["tensorboard"] if available else "none"


def prepare_work_dir(out_dir: str | Path, resume: bool) -> tuple[Path, str | None]:
    """(work dir, checkpoint to resume from or None); without `resume`, old checkpoints go."""
    work_dir = work_dir_for(out_dir)
    if not resume:
        shutil.rmtree(work_dir, ignore_errors=True)
    resume_from = last_checkpoint(work_dir)
    shutil.rmtree(work_dir / "final", ignore_errors=True)  # a save cut short
    if resume_from:
        log.info("resuming from %s", resume_from)
    return work_dir, resume_from


def finalize(trainer, out_dir: str | Path, work_dir: Path, metrics_name: str, metrics: dict) -> None:
    """Save the trained model and tokenizer (every rank takes part: ZeRO-3 gathers the
    weights), then on the main process write the metrics, rename into place and drop
    the checkpoints."""
    out_dir = Path(out_dir)
    final = work_dir / "final"
    trainer.save_model(str(final))
    if trainer.is_world_process_zero():
        if trainer.processing_class is not None and not (final / "tokenizer_config.json").exists():
            trainer.processing_class.save_pretrained(str(final))
        (final / "training_args.bin").unlink(missing_ok=True)
        atomic_write_json(final / metrics_name, json.loads(json.dumps(metrics, default=str)))
        if (work_dir / "runs").is_dir():  # TensorBoard event files of every (resumed) start
            shutil.move(str(work_dir / "runs"), str(final / "runs"))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        final.rename(out_dir)
        shutil.rmtree(work_dir, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()


WARMUP_STEPS = 3  # kernel compilation and allocator growth: left out of steady_tokens_per_s


def stage_callback():
    """Measures this train() call (tokens and wall time after any resume; and the steady
    rate after WARMUP_STEPS, what a long run gets) and skips the checkpoint transformers
    writes at the last step: `finalize` saves the model itself, and a full checkpoint
    with optimizer state of a large model costs minutes."""
    from transformers import TrainerCallback

    class StageCallback(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            self.tokens0, self.steps0, self.t0 = state.num_input_tokens_seen, state.global_step, time.perf_counter()
            self.tokens = self.steps = self.seconds = 0
            self.warm = None  # (tokens seen, time) once the warm-up steps are done
            self.steady_tokens_per_s = None
            self.first_step_s = None  # train start to the end of the first step: compile included

        def on_step_end(self, args, state, control, **kwargs):
            if state.max_steps and state.global_step >= state.max_steps:
                control.should_save = False
            if self.first_step_s is None:
                self.first_step_s = time.perf_counter() - self.t0
            if state.global_step - self.steps0 == WARMUP_STEPS:
                self.warm = (state.num_input_tokens_seen, time.perf_counter())

        def on_train_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            self.tokens = state.num_input_tokens_seen - self.tokens0
            self.steps = state.global_step - self.steps0
            self.seconds = now - self.t0
            if self.warm is not None and self.steps > WARMUP_STEPS:
                warm_tokens, warm_time = self.warm
                self.steady_tokens_per_s = (state.num_input_tokens_seen - warm_tokens) / (now - warm_time)

    return StageCallback()


def estimate_train_flops(model_in: str | Path, dataset, tokenizer, *, epochs: float, max_steps: int,
                         examples_per_step: int) -> float:
    """6 x parameters x the tokens this call will train on (every row's message text
    tokenized; `max_steps` > 0 caps the examples at max_steps x examples_per_step)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # the parameter count without weights
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_in))
                     .parameters())
    texts = [m["content"] for row in dataset for part in ("prompt", "completion") for m in row[part]]
    tokens_per_epoch = sum(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    examples = len(dataset) * epochs
    if max_steps and max_steps > 0:
        examples = min(examples, max_steps * examples_per_step) if epochs else max_steps * examples_per_step
    return 6.0 * params * tokens_per_epoch * examples / max(len(dataset), 1)


def train_stage(
    model_in: str | Path,
    dataset_jsonl: str | Path,
    out_dir: str | Path,
    *,
    epochs: float = 1.0,
    lr: float = 1e-4,
    batch_size: int = 2,
    grad_accum: int = 1,
    max_length: int = 2048,
    bf16: bool | None = None,
    use_cpu: bool | None = None,
    device: str | None = None,
    deepspeed_config: str | None = None,
    seed: int = 0,
    resume: bool = True,
    save_steps: int = 200,
    max_steps: int = -1,
    gradient_checkpointing: bool = False,
    attn: str = "auto",
    liger: bool | str = "auto",
    packing: bool | str = "auto",
    compile_min_flops: float | None = COMPILE_MIN_FLOPS,
    lr_scheduler_type: str = "cosine",
    warmup: float = 0.0,
    callbacks: list | None = None,
    extra_args: dict | None = None,
) -> dict:
    """Fine-tune `model_in` on `dataset_jsonl` (TRL conversational prompt-completion rows,
    docs/data_format.md) with the loss on completions only. The model and tokenizer land
    in `out_dir` atomically with `train_metrics.json`; the metrics are also returned:
    steps, train_loss, first_loss, last_loss, losses, tokens (non-padding input tokens of
    this call), tokens_per_s, steady_tokens_per_s (after WARMUP_STEPS), runtime_s,
    examples, resumed_from. `callbacks` go to the trainer, `extra_args` to SFTConfig as
    they are. `attn`/`liger`: see kernel_settings (`compile_min_flops`: the job size from
    which `auto` compiles; first_step_s in the metrics shows what the compile cost);
    `packing` packs several examples per row (best-fit decreasing); it needs padding-free
    kernels, and "auto" packs whenever they are on (TRL enforces `max_length` on
    padding-free batches only by packing)."""
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    from chorus.modeling import load_tokenizer

    work_dir, resume_from = prepare_work_dir(out_dir, resume)
    dataset = load_dataset("json", data_files=str(dataset_jsonl), split="train")
    dataset = dataset.select_columns(["prompt", "completion"])
    tokenizer = load_tokenizer(model_in)
    flags = precision_flags(device, bf16=bf16, use_cpu=use_cpu)
    on_gpu = not flags["use_cpu"]
    train_flops = None
    if on_gpu and "auto" in (attn, liger) and compile_min_flops is not None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        train_flops = estimate_train_flops(model_in, dataset, tokenizer, epochs=epochs, max_steps=max_steps,
                                           examples_per_step=batch_size * grad_accum * world)
    kernels = kernel_settings(attn, liger, on_gpu=on_gpu, train_flops=train_flops,
                              compile_min_flops=compile_min_flops)
    model = AutoModelForCausalLM.from_pretrained(model_in, dtype="bfloat16" if flags["bf16"] else "float32",
                                                 attn_implementation=kernels["attn_implementation"])
    config = dict(
        output_dir=str(work_dir),
        num_train_epochs=epochs,
        max_steps=max_steps,
        learning_rate=lr,
        lr_scheduler_type=lr_scheduler_type,
        warmup_steps=warmup,  # transformers 5: an int is steps, a float in [0, 1) a ratio
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        max_length=max_length,
        completion_only_loss=True,
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=2,
        include_num_input_tokens_seen="non_padding",
        report_to=report_targets(),
        seed=seed,
        data_seed=seed,
        deepspeed=deepspeed_config,
        gradient_checkpointing=gradient_checkpointing,
        dataloader_num_workers=0,
        padding_free=kernels["padding_free"],
        packing=kernels["padding_free"] and packing in (True, "auto"),
        use_liger_kernel=kernels["use_liger_kernel"],
        **flags,
    )
    args = SFTConfig(**{**config, **(extra_args or {})})
    throughput = stage_callback()
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[throughput, *(callbacks or [])],
    )
    result = trainer.train(resume_from_checkpoint=resume_from)
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    metrics = {
        "model_in": str(model_in),
        "steps": trainer.state.global_step,
        "train_loss": result.training_loss,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "losses": losses,
        "runtime_s": throughput.seconds,
        "tokens": throughput.tokens,
        "tokens_per_s": throughput.tokens / throughput.seconds if throughput.seconds else None,
        "steady_tokens_per_s": throughput.steady_tokens_per_s,
        "first_step_s": throughput.first_step_s,
        "train_flops_estimate": train_flops,
        "examples": len(dataset),
        "epochs": epochs,
        "lr": lr,
        "bf16": flags["bf16"],
        "world_size": trainer.args.world_size,
        "deepspeed": deepspeed_config,
        **kernels,
        "resumed_from": resume_from,
    }
    finalize(trainer, out_dir, work_dir, "train_metrics.json", metrics)
    log.info("SFT done: %s", json.dumps({k: v for k, v in metrics.items() if k != "losses"}))
    return metrics
