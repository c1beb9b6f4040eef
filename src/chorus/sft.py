"""One SFT stage with TRL's SFTTrainer (prompt-completion data, loss on completions)."""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from chorus.io import atomic_write_json
from chorus.modeling import save_model_atomically

log = logging.getLogger(__name__)


def work_dir_for(out_dir: str | Path) -> Path:
    """Checkpoints of an unfinished run live beside the output, so a killed job resumes."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.work"


def last_checkpoint(work_dir: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(work_dir)) if work_dir.is_dir() else None


def precision_flags(device: str) -> dict:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return {"bf16": torch.cuda.is_bf16_supported(), "use_cpu": False}
    return {"bf16": False, "use_cpu": True}


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
    device: str = "cpu",
    deepspeed_config: str | None = None,
    seed: int = 0,
    save_steps: int = 200,
    max_steps: int = -1,
    gradient_checkpointing: bool = False,
) -> dict:
    """Fine-tune `model_in` on `dataset_jsonl`; save the result to `out_dir` atomically and
    return the training metrics (also written to out_dir/train_metrics.json)."""
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    work_dir = work_dir_for(out_dir)
    dataset = load_dataset("json", data_files=str(dataset_jsonl), split="train")
    dataset = dataset.select_columns(["prompt", "completion"])
    tokenizer = AutoTokenizer.from_pretrained(model_in)
    flags = precision_flags(device)
    model = AutoModelForCausalLM.from_pretrained(
        model_in, dtype="bfloat16" if flags["bf16"] else "float32"
    )
    args = SFTConfig(
        output_dir=str(work_dir),
        num_train_epochs=epochs,
        max_steps=max_steps,
        learning_rate=lr,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        max_length=max_length,
        completion_only_loss=True,
        lr_scheduler_type="cosine",
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=2,
        report_to="none",
        seed=seed,
        deepspeed=deepspeed_config,
        gradient_checkpointing=gradient_checkpointing,
        dataloader_num_workers=0,
        **flags,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    resume = last_checkpoint(work_dir)
    if resume:
        log.info("resuming from %s", resume)
    start = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=resume)
    runtime = time.perf_counter() - start
    tokens = sum(len(x) for x in trainer.train_dataset["input_ids"]) * epochs
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    metrics = {
        "steps": trainer.state.global_step,
        "train_loss": result.training_loss,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "runtime_s": runtime,
        "tokens": tokens,
        "tokens_per_s": tokens / runtime if runtime else None,
        "examples": len(dataset),
        "resumed_from": resume,
    }
    if trainer.is_world_process_zero():
        save_model_atomically(trainer.model, tokenizer, out_dir)
        atomic_write_json(Path(out_dir) / "train_metrics.json", metrics)
        shutil.rmtree(work_dir, ignore_errors=True)
    log.info("SFT done: %s", json.dumps(metrics))
    return metrics
