"""Gather a model's coverage-closure rounds (eval.rounds > 1) into its per-sample table:
each row the sample after its last round, with per-round columns (chorus.rounds.merged_rows)."""

from chorus.io import atomic_write_text, script_logging
from chorus.report import per_sample_table
from chorus.rounds import attempts, check_scored, merged_rows, read_rounds

with script_logging(snakemake):
    rounds = read_rounds(list(snakemake.input.generations), list(snakemake.input.shards))
    for number, (generations, scores) in enumerate(rounds, start=1):
        check_scored(generations, scores, f"round {number}: ")
    table = per_sample_table(merged_rows(attempts(rounds), snakemake.params.rounds), model=snakemake.params.model,
                             sort=True)
    atomic_write_text(snakemake.output.table, table.to_csv(index=False))
    print(f"{len(table)} samples, {int(table['passed'].sum())} passing after {snakemake.params.rounds} rounds")
