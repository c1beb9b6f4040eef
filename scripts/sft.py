"""Fine-tune one SFT stage (or the distillation model) with TRL's SFTTrainer, one rank
per GPU the job was given (chorus.launch)."""

from chorus.io import script_logging
from chorus.launch import launch_training
from chorus.plan import Plan

with script_logging(snakemake):
    # settings that change no result: from the config, not params (editing them re-runs nothing)
    untracked = Plan(snakemake.config).untracked_settings("sft")
    launch_training(
        "chorus.sft:train_stage_job",
        dict(
            model_in=snakemake.input.model,
            dataset_jsonl=snakemake.input.data,
            out_dir=snakemake.output.model,
            stage={**snakemake.params.stage, "save_steps": untracked["save_steps"]},
            settings=snakemake.params.settings,
        ),
        {**snakemake.params.launch, "compile_cache": untracked["compile_cache"]},
    )
