"""The training lifecycle SFT (chorus.sft) and GRPO (chorus.rl) share.

A stage trains in `<out_dir>.tmp-train/` (checkpoints `checkpoint-<step>/`), saves the
final model and tokenizer to `<out_dir>.tmp-train/final/` and renames that to `out_dir`,
so `out_dir` only ever exists complete. A killed stage leaves its checkpoints behind and
the next call resumes from the last complete one (`resume=True`). Beside the work folder:
the one device resolver, precision flags and attention kernels, where metrics are logged,
and the callback that measures a stage's throughput.
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


def resolve_device(device: str | None = "auto") -> str:
    """config `device: auto|cpu|cuda` (None = auto) -> the device this job uses: cuda
    when a GPU is visible, else cpu."""
    if device not in (None, "auto"):
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


WORK_SUFFIX = ".tmp-train"


def world_size() -> int:
    """The ranks of this training job (chorus.launch sets WORLD_SIZE; 1 outside it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank_zero_decides(value):
    """`value` as rank 0 has it, on every rank of a distributed run (as it is outside one):
    a decision such as stopping that one rank took alone would leave the others waiting in
    a collective."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    shared = [value]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]


def work_dir_for(out_dir: str | Path) -> Path:
    """Checkpoints of an unfinished run live beside the output, so a killed job resumes."""
    out_dir = Path(out_dir)
    return out_dir.with_name(out_dir.name + WORK_SUFFIX)


def last_checkpoint(work_dir: str | Path) -> str | None:
    """The newest complete checkpoint in `work_dir`, or None. transformers writes a
    checkpoint in place and its `trainer_state.json` last: a newer folder without it was
    cut short by a kill, and is removed so that no run resumes from half a checkpoint."""
    from transformers.trainer_utils import sort_checkpoints

    if not Path(work_dir).is_dir():
        return None
    for checkpoint in reversed(sort_checkpoints(str(work_dir))):  # newest first
        if (Path(checkpoint) / "trainer_state.json").is_file():
            return checkpoint
        log.warning("removing incomplete checkpoint %s", checkpoint)
        shutil.rmtree(checkpoint, ignore_errors=True)
    return None


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


def precision_flags(device: str | None = None, *, bf16: bool | None = None, use_cpu: bool | None = None) -> dict:
    """TrainingArguments `use_cpu` / `bf16`. Unset ones follow `device` (resolve_device):
    bf16 on a GPU that supports it, float32 on CPU."""
    import torch

    if use_cpu is None:
        use_cpu = resolve_device(device) == "cpu"
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


def load_trainee(model_in: str | Path, flags: dict, **kwargs):
    """The model to train, in the precision `flags` (precision_flags) train in; `kwargs` go
    to from_pretrained (e.g. attn_implementation)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_in, dtype="bfloat16" if flags["bf16"] else "float32", **kwargs)


def common_args(work_dir: Path, flags: dict, *, save_steps: int, seed: int, deepspeed_config: str | None,
                gradient_checkpointing: bool) -> dict:
    """The TrainingArguments fields SFTConfig and GRPOConfig share here: checkpoints in the
    work folder every `save_steps` (the last two kept), a log line per step, the seeds,
    DeepSpeed, precision, and data loading in the training process."""
    return dict(
        output_dir=str(work_dir),
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=2,
        report_to=report_targets(),
        seed=seed,
        data_seed=seed,
        deepspeed=deepspeed_config,
        gradient_checkpointing=gradient_checkpointing,
        dataloader_num_workers=0,
        **flags,
    )


def report_targets() -> list[str] | str:
    """Where the trainers log metrics: TensorBoard event files (offline, under the
    model's `runs/`) when tensorboard or tensorboardX is installed, else nowhere."""
    available = any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX"))
    return ["tensorboard"] if available else "none"


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
