"""Write the rule's params as JSON: a file that changes exactly when those settings do,
for rules that must re-run on them but not on their inputs' modification times."""

from chorus.io import atomic_write_json, script_logging

with script_logging(snakemake):
    atomic_write_json(snakemake.output.settings, dict(snakemake.params.settings))
