"""Build the embedded default base model: a tiny random-init causal LM and a tokenizer
trained on the shipped task text (no hub download)."""

from chorus.io import script_logging
from chorus.modeling import build_tiny_model, task_corpus
from chorus.tasks import load_manifest

with script_logging(snakemake):
    # held-out test tasks stay out of the tokenizer's corpus too
    tasks = load_manifest(snakemake.input.manifest, splits=["train", "val"])
    build_tiny_model(snakemake.output.model, task_corpus(tasks), **snakemake.params.tiny)
