"""Gather one model's score shards into its per-sample table (one row per generation)."""

import pandas as pd

from chorus.io import atomic_write_text, read_jsonl, script_logging

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
    table = pd.DataFrame(rows).sort_values(["task_id", "sample_id"])
    first = ["task_id", "sample_id", "passed", "score", "status"]
    coverage = sorted(c for c in table.columns if c.startswith("cov_"))
    rest = [c for c in table.columns if c not in first and c not in coverage]
    table = table[first + coverage + rest]
    table.insert(0, "model", snakemake.params.model)
    atomic_write_text(snakemake.output.table, table.to_csv(index=False))
    print(f"{len(table)} samples, {int(table['passed'].sum())} passing")
