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
            # the checkpoint interval changes no result: config, not a param (no re-run)
            expert={**snakemake.params.expert, "save_steps": snakemake.config["rl"]["save_steps"]},
            simulation=snakemake.params.simulation,
            job_cpus=snakemake.threads,
        ),
        {**snakemake.params.launch, "compile_cache": snakemake.config["compile_cache"]},
    )
