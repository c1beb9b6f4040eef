"""Plots for the HTML report: per-task heatmaps, expert complementarity, coverage
distributions and training curves."""

import pandas as pd

from chorus import report
from chorus.io import script_logging
from chorus.report_pages import training_curves

with script_logging(snakemake):
    per_task = pd.read_csv(snakemake.input.per_task, index_col="task_id")
    per_sample = pd.read_csv(snakemake.input.per_sample)
    coverage = per_sample.pivot_table(index="task_id", columns="model", values="score", aggfunc="mean")
    report.plot_heatmap(per_task, snakemake.output.heatmap, coverage=coverage)
    matrix = report.complementarity(per_sample, snakemake.params.experts)
    report.plot_complementarity(matrix, snakemake.output.complementarity)
    report.plot_coverage_distribution(per_sample, snakemake.output.coverage)
    curves = training_curves(
        dict(zip(snakemake.params.stages, snakemake.input.sft)),
        dict(zip(snakemake.params.rl, snakemake.input.rl)),
    )
    report.plot_training_curves(curves, snakemake.output.training)
