"""One SFT stage with TRL's SFTTrainer (prompt-completion data, loss on completions).

The work folder, resume, precision, kernels and finalize are chorus.training's, shared
with GRPO (chorus.rl). The workflow's sft rule (scripts/sft.py) starts `train_stage` on
every rank (chorus.launch) with the job's SFTStage (SFTStage.from_job).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from chorus.settings import SFTStage
from chorus.training import (
    common_args,
    finalize,
    kernel_settings,
    load_trainee,
    precision_flags,
    prepare_work_dir,
    stage_callback,
    world_size,
)

log = logging.getLogger(__name__)


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
    stage: SFTStage | dict,
    *,
    bf16: bool | None = None,
    use_cpu: bool | None = None,
    device: str | None = None,
    deepspeed_config: str | None = None,
    resume: bool = True,
    callbacks: list | None = None,
    extra_args: dict | None = None,
) -> dict:
    """Fine-tune `model_in` on `dataset_jsonl` (TRL conversational prompt-completion rows,
    docs/data_format.md) with the settings of `stage`, the loss on completions only. The
    model and tokenizer land in `out_dir` atomically with `train_metrics.json`; the
    metrics are also returned: steps, train_loss, first_loss, last_loss, losses, tokens
    (non-padding input tokens of this call), tokens_per_s, steady_tokens_per_s (after
    training.WARMUP_STEPS), runtime_s, examples, resumed_from. `stage.attention` and
    `stage.liger_kernel`: see training.kernel_settings (`compile_min_flops`: the job size
    from which `auto` compiles; first_step_s in the metrics shows what the compile cost);
    `stage.packing` packs several examples per row (best-fit decreasing); it needs
    padding-free kernels, and "auto" packs whenever they are on (TRL enforces
    `max_length` on padding-free batches only by packing). `stage` may come as a dict of
    SFTStage's fields. `callbacks` go to the trainer, `extra_args` to SFTConfig as they
    are."""
    from datasets import load_dataset
    from trl import SFTTrainer

    from chorus.modeling import load_tokenizer

    stage = SFTStage(**stage) if isinstance(stage, dict) else stage
    work_dir, resume_from = prepare_work_dir(out_dir, resume)
    dataset = load_dataset("json", data_files=str(dataset_jsonl), split="train")
    dataset = dataset.select_columns(["prompt", "completion"])
    tokenizer = load_tokenizer(model_in)
    flags = precision_flags(device, bf16=bf16, use_cpu=use_cpu)
    kernels, train_flops = stage_kernels(stage, not flags["use_cpu"], model_in, dataset, tokenizer)
    model = load_trainee(model_in, flags, attn_implementation=kernels["attn_implementation"])
    throughput = stage_callback()
    trainer = SFTTrainer(
        model=model,
        args=sft_config(stage, work_dir, flags, kernels, deepspeed_config, extra_args),
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
        "epochs": stage.epochs,
        "lr": stage.lr,
        "bf16": flags["bf16"],
        "world_size": trainer.args.world_size,
        "deepspeed": deepspeed_config,
        **kernels,
        "resumed_from": resume_from,
    }
    finalize(trainer, out_dir, work_dir, "train_metrics.json", metrics)
    log.info("SFT done: %s", json.dumps({k: v for k, v in metrics.items() if k != "losses"}))
    return metrics


def stage_kernels(stage: SFTStage, on_gpu: bool, model_in, dataset, tokenizer) -> tuple[dict, float | None]:
    """The stage's kernels (training.kernel_settings) and, where `auto` decides by the job
    size, the training FLOPs estimated for it."""
    train_flops = None
    if on_gpu and "auto" in (stage.attention, stage.liger_kernel) and stage.compile_min_flops is not None:
        train_flops = estimate_train_flops(model_in, dataset, tokenizer, epochs=stage.epochs,
                                           max_steps=stage.max_steps,
                                           examples_per_step=stage.batch_size * stage.grad_accum * world_size())
    kernels = kernel_settings(stage.attention, stage.liger_kernel, on_gpu=on_gpu, train_flops=train_flops,
                              compile_min_flops=stage.compile_min_flops)
    return kernels, train_flops


def sft_config(stage: SFTStage, work_dir: Path, flags: dict, kernels: dict, deepspeed_config: str | None,
               extra_args: dict | None):
    """TRL's SFTConfig of `stage`, with the kernels chosen for it (training.kernel_settings)."""
    from trl import SFTConfig

    config = dict(
        **common_args(work_dir, flags, save_steps=stage.save_steps, seed=stage.seed,
                      deepspeed_config=deepspeed_config, gradient_checkpointing=stage.gradient_checkpointing),
        num_train_epochs=stage.epochs,
        max_steps=stage.max_steps,
        learning_rate=stage.lr,
        lr_scheduler_type=stage.lr_scheduler_type,
        warmup_steps=stage.warmup,  # transformers 5: an int is steps, a float in [0, 1) a ratio
        per_device_train_batch_size=stage.batch_size,
        gradient_accumulation_steps=stage.grad_accum,
        max_length=stage.max_length,
        completion_only_loss=True,
        include_num_input_tokens_seen="non_padding",
        padding_free=kernels["padding_free"],
        packing=kernels["padding_free"] and stage.packing in (True, "auto"),
        use_liger_kernel=kernels["use_liger_kernel"],
    )
    return SFTConfig(**{**config, **(extra_args or {})})

