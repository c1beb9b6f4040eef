"""Train one RL expert with GRPO, one rank per GPU the job was given (chorus.launch); the
reward is the coverage reached in simulation."""

from chorus.io import script_logging
from chorus.launch import launch_training

with script_logging(snakemake):
    launch_training(
        "chorus.rl:train_expert_job",
        dict(
            model_in=snakemake.input.model,
            manifest=snakemake.input.manifest,
            out_dir=snakemake.output.model,
            expert=snakemake.params.expert,
            simulation=snakemake.params.simulation,
            job_cpus=snakemake.threads,
        ),
        snakemake.params.launch,
    )
