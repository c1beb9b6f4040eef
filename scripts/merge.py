"""Merge RL experts with mergekit; the mergekit YAML is kept beside the merged model."""

from chorus.io import script_logging
from chorus.merge import mergekit_config, run_merge
from chorus.training import resolve_device

with script_logging(snakemake):
    strategy = snakemake.params.strategy
    merge_config = mergekit_config(
        strategy["method"],
        list(snakemake.input.experts),
        snakemake.input.base,
        strategy["params"],
    )
    run_merge(merge_config, snakemake.output.model, device=resolve_device(snakemake.params.device))
