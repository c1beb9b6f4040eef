"""Fine-tune one SFT stage (or the distillation model) with TRL's SFTTrainer, one rank
per GPU the job was given (chorus.launch)."""

from chorus.io import script_logging
from chorus.launch import launch_training
from chorus.plan import job_settings
from chorus.settings import SFTStage

with script_logging(snakemake):
    settings = job_settings(snakemake.params, snakemake.config)
    launch_training(
        "chorus.sft:train_stage",
        dict(
            model_in=snakemake.input.model,
            dataset_jsonl=snakemake.input.data,
            out_dir=snakemake.output.model,
            stage=SFTStage.from_job(settings["stage"], settings["settings"]),
        ),
        settings["launch"],
    )
