"""Build one SFT stage's dataset from its data mix (see docs/data_format.md)."""

from chorus.data import build_stage_dataset
from chorus.io import script_logging
from chorus.tasks import load_manifest

with script_logging(snakemake):
    tasks = load_manifest(snakemake.input.manifest, splits=["train"])
    rows = build_stage_dataset(tasks, snakemake.params.mix, snakemake.output.data)
    print(f"{len(rows)} SFT examples for mix {snakemake.params.mix}")
