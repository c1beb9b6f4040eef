"""Train one RL expert with GRPO, one rank per GPU the job was given (chorus.launch); the
reward is the coverage reached in simulation."""

from chorus.harness.timeouts import sandbox_settings
from chorus.io import script_logging
from chorus.launch import launch_training
from chorus.plan import job_settings
from chorus.rl import expert_tasks
from chorus.settings import GRPOExpert

with script_logging(snakemake):
    settings = job_settings(snakemake.params, snakemake.config)
    expert = GRPOExpert.from_job(settings["expert"])
    sim_limits, sim_timeouts = sandbox_settings(settings["simulation"])
    launch_training(
        "chorus.rl:train_expert",
        dict(
            model_in=snakemake.input.model,
            tasks=expert_tasks(snakemake.input.manifest, expert),
            out_dir=snakemake.output.model,
            expert=expert,
            sim_workers=snakemake.threads,
            sim_limits=sim_limits,
            sim_timeouts=sim_timeouts,
        ),
        settings["launch"],
    )
