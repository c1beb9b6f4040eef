"""Plots for the HTML report: per-task heatmap and expert complementarity."""

import pandas as pd

from chorus import report
from chorus.io import script_logging

with script_logging(snakemake):
    per_task = pd.read_csv(snakemake.input.per_task, index_col="task_id")
    per_sample = pd.read_csv(snakemake.input.per_sample)
    report.plot_heatmap(per_task, snakemake.output.heatmap)
    matrix = report.complementarity(per_sample, snakemake.params.experts)
    report.plot_complementarity(matrix, snakemake.output.complementarity)
