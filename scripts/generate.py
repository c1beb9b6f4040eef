"""Sample k completions per task of the pool's splits from one model."""

from chorus.generate import sample_completions
from chorus.io import script_logging
from chorus.plan import job_settings
from chorus.settings import Sampling
from chorus.tasks import load_manifest
from chorus.training import resolve_device

with script_logging(snakemake):
    settings = job_settings(snakemake.params, snakemake.config)
    pool = settings["pool"]
    sample_completions(
        snakemake.input.model,
        load_manifest(snakemake.input.manifest, splits=pool["splits"]),
        pool["k"],
        snakemake.output.generations,
        Sampling.from_job(settings["sampling"]),
        seed=snakemake.params.seed,
        device=resolve_device(snakemake.params.device),
    )
