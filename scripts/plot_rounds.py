"""The report's coverage-closure rounds plot (eval.rounds > 1): Pass@1 and mean coverage
after each round, per model (chorus.report.plot_rounds)."""

import pandas as pd

from chorus.io import script_logging
from chorus.report import plot_rounds

with script_logging(snakemake):
    plot_rounds(pd.read_csv(snakemake.input.per_sample), snakemake.output.plot, snakemake.params.bootstrap)
