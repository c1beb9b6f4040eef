"""One SFT stage with TRL's SFTTrainer (prompt-completion data, loss on completions).

The work folder, resume, precision, kernels and finalize are chorus.training's, shared
with GRPO (chorus.rl); `train_stage_job` is the workflow's entry point (scripts/sft.py,
started per rank by chorus.launch).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from chorus.training import (
    COMPILE_MIN_FLOPS,
    common_args,
    finalize,
    kernel_settings,
    load_trainee,
    precision_flags,
    prepare_work_dir,
    stage_callback,
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
    this call), tokens_per_s, steady_tokens_per_s (after training.WARMUP_STEPS), runtime_s,
    examples, resumed_from. `callbacks` go to the trainer, `extra_args` to SFTConfig as
    they are. `attn`/`liger`: see training.kernel_settings (`compile_min_flops`: the job size from
    which `auto` compiles; first_step_s in the metrics shows what the compile cost);
    `packing` packs several examples per row (best-fit decreasing); it needs padding-free
    kernels, and "auto" packs whenever they are on (TRL enforces `max_length` on
    padding-free batches only by packing)."""
    from datasets import load_dataset
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
    model = load_trainee(model_in, flags, attn_implementation=kernels["attn_implementation"])
    config = dict(
        **common_args(work_dir, flags, save_steps=save_steps, seed=seed, deepspeed_config=deepspeed_config,
                      gradient_checkpointing=gradient_checkpointing),
        num_train_epochs=epochs,
        max_steps=max_steps,
        learning_rate=lr,
        lr_scheduler_type=lr_scheduler_type,
        warmup_steps=warmup,  # transformers 5: an int is steps, a float in [0, 1) a ratio
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        max_length=max_length,
        completion_only_loss=True,
        include_num_input_tokens_seen="non_padding",
        padding_free=kernels["padding_free"],
        packing=kernels["padding_free"] and packing in (True, "auto"),
        use_liger_kernel=kernels["use_liger_kernel"],
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


def train_stage_job(
    model_in: str,
    dataset_jsonl: str,
    out_dir: str,
    stage: dict,
    settings: dict,
    device: str | None = None,
    deepspeed_config: str | None = None,
) -> dict:
    """One workflow SFT job (JSON-able arguments, so chorus.launch can start it per rank),
    like chorus.rl.train_expert_job: the stage's `epochs`, `lr`, `seed` and `save_steps`
    (config `sft.stages`, merged by Plan.stage; the consolidation SFT's own) and the batch
    and kernel settings the SFT stages share (config `sft`, `max_length`)."""
    return train_stage(
        model_in,
        dataset_jsonl,
        out_dir,
        epochs=stage["epochs"],
        lr=stage["lr"],
        seed=stage["seed"],
        save_steps=stage["save_steps"],
        batch_size=settings["batch_size"],
        grad_accum=settings["grad_accum"],
        max_length=settings["max_length"],
        attn=settings["attn"],
        liger=settings["liger"],
        compile_min_flops=settings["compile_min_flops"],
        device=device,
        deepspeed_config=deepspeed_config,
    )
