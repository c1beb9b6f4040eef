"""Per-task Pass@1 table, summary table (with the oracle best-expert row and bootstrap
intervals), the paired comparisons of the study's questions, the mean and interval over
seed replicates, all samples."""

import pandas as pd

from chorus import report
from chorus.io import atomic_write_text, script_logging
from chorus.report_pages import seed_summary

with script_logging(snakemake):
    per_sample = pd.concat([pd.read_csv(t) for t in snakemake.input.tables], ignore_index=True)
    experts = snakemake.params.experts
    per_task = report.per_task_pass1(per_sample, experts)
    summary = report.summary_table(
        per_sample, snakemake.params.pass_at, experts, bootstrap=snakemake.params.bootstrap
    )
    comparisons = report.comparison_table(per_task, snakemake.params.comparisons, experts,
                                          bootstrap=snakemake.params.bootstrap)
    seeds = seed_summary(summary)
    atomic_write_text(snakemake.output.per_sample, per_sample.to_csv(index=False))
    atomic_write_text(snakemake.output.per_task, per_task.to_csv(float_format="%.4f"))
    atomic_write_text(snakemake.output.summary, summary.to_csv(index=False, float_format="%.4f"))
    atomic_write_text(snakemake.output.comparisons, comparisons.to_csv(index=False, float_format="%.4f"))
    atomic_write_text(snakemake.output.seeds, seeds.to_csv(index=False, float_format="%.4f"))
    print(summary.to_string(index=False))
    print(comparisons.to_string(index=False))
