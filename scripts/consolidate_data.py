"""Distillation data: the union of every expert's simulator-verified passing samples on
train tasks (deduplicated), optionally anchored with the reference stimuli."""

from chorus.data import build_consolidation_dataset
from chorus.io import atomic_write_json, script_logging
from chorus.tasks import load_manifest

with script_logging(snakemake):
    stats = build_consolidation_dataset(
        load_manifest(snakemake.input.manifest, splits=["train"]),
        list(zip(snakemake.input.generations, snakemake.input.tables)),
        snakemake.output.data,
        include_reference=snakemake.params.include_reference,
    )
    atomic_write_json(snakemake.output.stats, stats)
    print(stats)
