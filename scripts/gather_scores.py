"""Gather one model's score shards into its per-sample table (one row per generation)."""

from chorus.io import atomic_write_text, read_jsonl, script_logging
from chorus.report import per_sample_table

with script_logging(snakemake):
    generations = read_jsonl(snakemake.input.generations)
    rows = [row for shard in snakemake.input.shards for row in read_jsonl(shard)]
    scored = {(r["task_id"], r["sample_id"]) for r in rows}
    expected = {(g["task_id"], g["sample_id"]) for g in generations}
    if scored != expected or len(rows) != len(generations):
        raise RuntimeError(
            f"{len(rows)} results for {len(generations)} generations: "
            f"missing {sorted(expected - scored)[:5]}, unexpected {sorted(scored - expected)[:5]}"
        )
    table = per_sample_table(rows, model=snakemake.params.model, sort=True)
    atomic_write_text(snakemake.output.table, table.to_csv(index=False))
    print(f"{len(table)} samples, {int(table['passed'].sum())} passing")
