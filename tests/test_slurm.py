"""The workflow on a real Slurm cluster, through profiles/slurm-ci (the plugin submits
every job with sbatch and reads states from sacct). One simulation job is killed mid-run:
Snakemake retries it and the tables still equal those of the local run."""

import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import BIN, REPO, e2e_config, run_snakemake
from slurm_support import require_slurm, running_jobs, sacct_jobs

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_tiny_workflow_runs_as_sbatch_jobs(tmp_path):
    require_slurm()
    (tmp_path / "Snakefile").write_text(
        "rule all:\n    input: expand('out/{i}.txt', i=range(3))\n\n"
        "rule make:\n    output: 'out/{i}.txt'\n    threads: 1\n"
        "    shell: 'hostname > {output}'\n"
    )
    since = datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--profile", str(REPO / "profiles" / "slurm-ci"), "-d", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert len(list((tmp_path / "out").iterdir())) == 3
    jobs = [j for j in sacct_jobs(since) if j["comment"].startswith("rule_make")]
    assert len(jobs) == 3 and all(j["state"] == "COMPLETED" and j["account"] == "chorus" for j in jobs)


def cancel_first_score_job(deadline: float) -> str | None:
    """Wait for a running score_shard job and cancel it, as a preemption would."""
    while time.monotonic() < deadline:
        for job in running_jobs():
            if job["comment"].startswith("rule_score_shard") and job["state"] == "RUNNING":
                subprocess.run(["scancel", "--signal=KILL", "--full", job["id"]], check=True)
                return job["id"]
        time.sleep(0.3)
    return None


def test_pipeline_on_slurm_survives_a_killed_job_and_matches_local(local_run, tmp_path):
    require_slurm()
    config = e2e_config(tmp_path)
    since = datetime.datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    cmd = [
        str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"),
        "--profile", str(REPO / "profiles" / "slurm-ci"),
        "--directory", str(tmp_path), "--configfile", str(config),
    ]
    log = open(tmp_path / "snakemake.log", "w")
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
    )
    killed = cancel_first_score_job(time.monotonic() + 2400)
    returncode = proc.wait(timeout=3000)
    log.close()
    output = (tmp_path / "snakemake.log").read_text()
    assert returncode == 0, output[-6000:]
    assert killed is not None, "no score_shard job was seen running"

    jobs = sacct_jobs(since)
    states = {j["id"]: j for j in jobs}
    assert states[killed]["state"] in ("CANCELLED", "FAILED", "CANCELLED by 0"), states[killed]
    retried = [j for j in jobs if j["comment"] == states[killed]["comment"] and j["id"] != killed]
    assert retried and retried[-1]["state"] == "COMPLETED"
    for rule in ("rule_sft", "rule_rl", "rule_merge", "rule_generate", "rule_score_shard"):
        assert any(j["comment"].startswith(rule) and j["state"] == "COMPLETED" for j in jobs), rule

    for table in ("per_task_pass1.csv", "summary.csv"):
        ours = pd.read_csv(tmp_path / "results" / "tables" / table)
        theirs = pd.read_csv(local_run / "results" / "tables" / table)
        pd.testing.assert_frame_equal(ours, theirs)
    samples = pd.read_csv(tmp_path / "results" / "tables" / "per_sample.csv")
    assert len(samples) == len(pd.read_csv(local_run / "results" / "tables" / "per_sample.csv"))
