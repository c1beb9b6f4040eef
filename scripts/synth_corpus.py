"""Gather the verified shards into one corpus listing with summed statistics."""

from chorus.io import script_logging
from chorus.synth.corpus import gather_corpus

with script_logging(snakemake):
    summary = gather_corpus(snakemake.input.stats, snakemake.input.tasks, snakemake.output.corpus)
    print({k: v for k, v in summary.items() if k != "tasks"})
