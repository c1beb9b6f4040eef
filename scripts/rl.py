"""Train one RL expert with GRPO, one rank per GPU the job was given (chorus.launch); the
reward is the coverage reached in simulation."""

from chorus.io import script_logging
from chorus.launch import launch_training
from chorus.plan import job_settings

with script_logging(snakemake):
    settings = job_settings(snakemake.params, snakemake.config)
    launch_training(
        "chorus.rl:train_expert_job",
        dict(
            model_in=snakemake.input.model,
            manifest=snakemake.input.manifest,
            out_dir=snakemake.output.model,
            expert=settings["expert"],
            simulation=settings["simulation"],
            job_cpus=snakemake.threads,
        ),
        settings["launch"],
    )
