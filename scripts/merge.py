"""Merge RL experts with mergekit; the mergekit YAML is kept beside the merged model."""

from chorus.io import resolve_device, script_logging
from chorus.merge import mergekit_config, run_merge

with script_logging(snakemake):
    strategy = snakemake.params.strategy
    merge_config = mergekit_config(
        strategy["method"],
        list(snakemake.input.experts),
        snakemake.input.base,
        strategy["params"],
    )
    run_merge(merge_config, snakemake.output.model, device=resolve_device(snakemake.params.device))
