"""The record of one workflow run that `make experiment-publish` writes as run.json: when
its jobs ran (Snakemake's benchmark files), on which device, how large the evaluation was,
and the command that ran it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd

# the jobs whose end is the end of the run: the report's tables and plots
REPORT_STAGES = ("aggregate", "report_tables", "plots")


def job_times(benchmarks: str | Path) -> pd.DataFrame:
    """One row per job that wrote a benchmark file: its stage (the rule of a
    benchmarks/<rule>/... file, or the file's own name at the top, as the report's
    stage table names it), wall seconds `s`, and `start`/`end` in epoch seconds. Snakemake
    writes the file when the job ends, so its modification time is the end."""
    rows = []
    for path in sorted(Path(benchmarks).rglob("*.tsv")):
        relative = path.relative_to(benchmarks)
        seconds = float(pd.read_csv(path, sep="\t").iloc[-1]["s"])
        end = path.stat().st_mtime
        rows.append({"stage": relative.parts[0] if len(relative.parts) > 1 else path.stem,
                     "job": str(relative.with_suffix("")), "s": seconds, "start": end - seconds, "end": end})
    return pd.DataFrame(rows, columns=["stage", "job", "s", "start", "end"])


def stage_times(jobs: pd.DataFrame) -> dict:
    """Per stage: jobs, summed and longest job seconds, and its span on the run's clock
    (first start and last end, seconds after the run's first job started)."""
    origin = jobs["start"].min()
    stages = {}
    for stage, group in jobs.groupby("stage", sort=False):
        stages[stage] = {
            "jobs": len(group),
            "sum_s": round(group["s"].sum(), 1),
            "longest_s": round(group["s"].max(), 1),
            "first_start_s": round(group["start"].min() - origin, 1),
            "last_end_s": round(group["end"].max() - origin, 1),
            "span_s": round(group["end"].max() - group["start"].min(), 1),
        }
    return dict(sorted(stages.items(), key=lambda item: item[1]["first_start_s"]))


def evaluation_size(per_sample: str | Path) -> dict:
    """Models, tasks per model and samples per task of the evaluation table."""
    table = pd.read_csv(per_sample)
    per_task = table.groupby(["model", "task_id"]).size()
    return {"models": int(table["model"].nunique()), "tasks": int(table.groupby("model")["task_id"].nunique().max()),
            "k": int(per_task.max())}


def device_name() -> str:
    """The GPU's name as nvidia-smi reports it, else 'cpu'."""
    if shutil.which("nvidia-smi"):
        query = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                               capture_output=True, text=True)
        names = sorted(set(query.stdout.split("\n")) - {""})
        if query.returncode == 0 and names:
            return ", ".join(names)
    return "cpu"


def run_record(results: str | Path, command: str) -> dict:
    """run.json of the run whose outputs are in `results`: wall_s from its first job's
    start to the end of its report jobs, the device, the evaluation's size, `command`, and
    the wall times per stage. A run resumed across sessions counts the pause as wall time."""
    results = Path(results)
    jobs = job_times(results / "benchmarks")
    if jobs.empty:
        raise ValueError(f"no benchmark files under {results / 'benchmarks'}: has the workflow run?")
    report = jobs[jobs["stage"].isin(REPORT_STAGES)]
    end = (report if not report.empty else jobs)["end"].max()
    return {
        "wall_s": round(end - jobs["start"].min(), 1),
        "device": device_name(),
        **evaluation_size(results / "tables" / "per_sample.csv"),
        "command": command,
        "jobs": len(jobs),
        "job_s_sum": round(jobs["s"].sum(), 1),
        "stages": stage_times(jobs),
    }
