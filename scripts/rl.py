"""Train one RL expert with GRPO, one rank per GPU the job was given (chorus.launch); the
reward is the coverage reached in simulation."""

from chorus.io import script_logging
from chorus.launch import launch_training
from chorus.plan import Plan

with script_logging(snakemake):
    # settings that change no result: from the config, not params (editing them re-runs nothing)
    plan = Plan(snakemake.config)
    untracked = plan.untracked_settings("rl")
    launch_training(
        "chorus.rl:train_expert_job",
        dict(
            model_in=snakemake.input.model,
            manifest=snakemake.input.manifest,
            out_dir=snakemake.output.model,
            expert={**snakemake.params.expert, "save_steps": untracked["save_steps"]},
            simulation=plan.simulation_settings(snakemake.params.simulation),
            job_cpus=snakemake.threads,
        ),
        {**snakemake.params.launch, "compile_cache": untracked["compile_cache"]},
    )
