"""Fine-tune one SFT stage (or the distillation model) with TRL's SFTTrainer, one rank
per GPU the job was given (chorus.launch)."""

from chorus.io import script_logging
from chorus.launch import launch_training

with script_logging(snakemake):
    launch_training(
        "chorus.sft:train_stage_job",
        dict(
            model_in=snakemake.input.model,
            dataset_jsonl=snakemake.input.data,
            out_dir=snakemake.output.model,
            # the checkpoint interval changes no result: config, not a param (no re-run)
            stage={**snakemake.params.stage, "save_steps": snakemake.config["sft"]["save_steps"]},
            settings=snakemake.params.settings,
        ),
        {**snakemake.params.launch, "compile_cache": snakemake.config["compile_cache"]},
    )
