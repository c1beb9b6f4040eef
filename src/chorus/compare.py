"""chorus-compare: the summaries of several runs (results/<run_name>/ folders, config
`run_name`) in one table, one row per run and model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd


def compare_runs(results_dirs: list[str | Path]) -> pd.DataFrame:
    """Rows of every run's tables/summary.csv, with the run (its folder name) first."""
    frames = []
    for folder in map(Path, results_dirs):
        summary = pd.read_csv(folder / "tables" / "summary.csv")
        summary.insert(0, "run", folder.name)
        frames.append(summary)
    return pd.concat(frames, ignore_index=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="chorus-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="results folders, e.g. results/a results/b")
    parser.add_argument("--out", type=Path, default=None, help="also write the table as CSV")
    args = parser.parse_args(argv)
    table = compare_runs(args.runs)
    if args.out:
        table.to_csv(args.out, index=False, float_format="%.4f")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
