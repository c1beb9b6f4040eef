"""Generate and verify one shard of the synthetic corpus (chorus.synth.verify)."""

from chorus.io import atomic_write_json, script_logging
from chorus.synth.corpus import shard_jobs
from chorus.synth.verify import generate_and_verify

with script_logging(snakemake):
    cfg, shard = snakemake.params.synth, snakemake.params.shard
    jobs = shard_jobs(cfg, shard, cfg["shards"])
    stats = generate_and_verify(
        jobs,
        snakemake.output.tasks,
        seed=cfg["seed"],
        variants=cfg["variants"],
        workers=snakemake.threads,
    )
    print(f"shard {shard}: {stats['kept']}/{stats['designs']} designs verified, "
          f"{stats['examples']} reference stimuli, rejected {stats['rejected']}, {stats['wall_s']} s")
    atomic_write_json(snakemake.output.stats, {"shard": shard, **stats})
