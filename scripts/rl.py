"""Train one RL expert with GRPO; the reward is the coverage reached in simulation."""

from chorus.harness import SandboxLimits
from chorus.io import resolve_device, script_logging
from chorus.rl import train_expert
from chorus.tasks import load_manifest

with script_logging(snakemake):
    expert = snakemake.params.expert
    sim = snakemake.params.simulation
    tasks = load_manifest(
        snakemake.input.manifest,
        splits=expert.get("splits", ["train"]),
    )
    if expert.get("difficulties"):
        tasks = [t for t in tasks if t.difficulty in expert["difficulties"]]
    train_expert(
        snakemake.input.model,
        tasks,
        snakemake.output.model,
        reward=expert["reward"],
        format_weight=expert["format_weight"],
        num_generations=expert["num_generations"],
        max_completion_length=expert["max_completion_length"],
        steps=expert["steps"],
        lr=expert["lr"],
        beta=expert["beta"],
        temperature=expert["temperature"],
        batch_size=expert["batch_size"],
        seed=expert["seed"],
        sim_workers=snakemake.threads,
        sim_limits=SandboxLimits(timeout_s=sim["timeout_s"], mem_mb=sim["mem_mb"]),
        device=resolve_device(snakemake.params.device),
        deepspeed_config=snakemake.params.deepspeed,
    )
