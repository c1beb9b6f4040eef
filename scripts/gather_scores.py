"""Gather one model's score shards into its per-sample table (one row per generation).
With coverage-closure rounds (eval.rounds > 1) the inputs hold every round's generations
and shards, and each row is the sample after its last round (chorus.rounds.merged_rows)."""

from chorus.io import atomic_write_text, script_logging
from chorus.report import per_sample_table
from chorus.rounds import attempts, check_scored, merged_rows, read_rounds

with script_logging(snakemake):
    rounds = read_rounds(list(snakemake.input.generations), list(snakemake.input.shards))
    for number, (generations, scores) in enumerate(rounds, start=1):
        check_scored(generations, scores, f"round {number}: " if len(rounds) > 1 else "")
    rows = rounds[0][1] if len(rounds) == 1 else merged_rows(attempts(rounds), len(rounds))
    table = per_sample_table(rows, model=snakemake.params.model, sort=True)
    atomic_write_text(snakemake.output.table, table.to_csv(index=False))
    print(f"{len(table)} samples, {int(table['passed'].sum())} passing")
