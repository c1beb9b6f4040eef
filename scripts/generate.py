"""Sample k completions per task of the pool's splits from one model."""

from chorus.generate import sample_completions
from chorus.io import script_logging
from chorus.plan import job_settings
from chorus.tasks import load_manifest
from chorus.training import resolve_device

with script_logging(snakemake):
    settings = job_settings(snakemake.params, snakemake.config)
    pool, sampling = settings["pool"], settings["sampling"]
    sample_completions(
        snakemake.input.model,
        load_manifest(snakemake.input.manifest, splits=pool["splits"]),
        pool["k"],
        snakemake.output.generations,
        temperature=sampling["temperature"],
        top_p=sampling["top_p"],
        max_new_tokens=sampling["max_new_tokens"],
        seed=snakemake.params.seed,
        device=resolve_device(snakemake.params.device),
        sampler=sampling["sampler"],
        batch_size=sampling["batch_size"],
    )
