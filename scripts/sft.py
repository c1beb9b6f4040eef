"""Fine-tune one SFT stage (or the distillation model) with TRL's SFTTrainer."""

from chorus.io import resolve_device, script_logging
from chorus.sft import train_stage

with script_logging(snakemake):
    stage = snakemake.params.stage
    train_stage(
        snakemake.input.model,
        snakemake.input.data,
        snakemake.output.model,
        epochs=stage["epochs"],
        lr=stage["lr"],
        batch_size=snakemake.params.batch_size,
        grad_accum=snakemake.params.grad_accum,
        max_length=snakemake.params.max_length,
        device=resolve_device(snakemake.params.device),
        deepspeed_config=snakemake.params.deepspeed,
        seed=stage.get("seed", 0),
    )
