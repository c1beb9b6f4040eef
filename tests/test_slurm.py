"""Snakemake on a real Slurm cluster through profiles/slurm-ci: the plugin submits every job
with sbatch and reads its state from sacct (slurmdbd accounting). The local one-node
cluster comes from .ci/slurm/start_cluster.sh; without it these tests skip, or fail when
CHORUS_REQUIRE_SLURM=1 (CI)."""

import subprocess
import textwrap
import time

import pandas as pd
import pytest

from conftest import REPO, e2e_config
from slurm_support import (
    kill_job_tasks,
    sacct_jobs,
    sacct_time,
    slurm_cluster,  # noqa: F401  (fixture)
    slurm_run_id,
    snakemake_on_slurm,
    wait_for_job,
)

pytestmark = [pytest.mark.slurm]

TINY = textwrap.dedent(
    """
    rule all:
        input: "summary.txt"

    rule make:
        output: "out/{i}.txt"
        shell: "echo $SLURM_JOB_ID $SLURM_JOB_PARTITION > {output}"

    rule pair:
        input: "out/{i}.txt"
        output: "pair/{i}.txt"
        threads: 2
        shell: "echo threads={threads} cpus=$SLURM_CPUS_PER_TASK > {output}; cat {input} >> {output}"

    # named like the workflow's GPU rule: profiles/slurm-ci sends it to partition "gpu"
    rule generate:
        input: expand("pair/{i}.txt", i=range(3))
        output: "summary.txt"
        shell: "cat {input} > {output}; echo $SLURM_JOB_PARTITION >> {output}"
    """
)


def run_profile(workdir, snakefile, timeout=900):
    cmd, env = snakemake_on_slurm(workdir, snakefile)
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, proc.stdout + proc.stderr


def test_slurm_cluster_runs_jobs(slurm_cluster, tmp_path):
    assert {"debug", "gpu"} <= set(slurm_cluster["partitions"]), slurm_cluster
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(TINY)
    since = sacct_time()
    proc, log = run_profile(tmp_path, snakefile)
    assert proc.returncode == 0, log[-6000:]

    for i in range(3):
        pair = (tmp_path / "pair" / f"{i}.txt").read_text().splitlines()
        assert pair[0] == "threads=2 cpus=2", pair  # threads: 2 -> sbatch --cpus-per-task=2
        assert pair[1].split()[1] == "debug"
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert summary[-1] == "gpu"

    jobs = sacct_jobs(since, run_id=slurm_run_id(log))
    by_rule = {}
    for job in jobs:
        by_rule.setdefault(job["rule"], []).append(job)
    assert {rule: len(js) for rule, js in by_rule.items()} == {"make": 3, "pair": 3, "generate": 1}, jobs
    assert all(j["state"] == "COMPLETED" and j["account"] == "chorus" for j in jobs), jobs
    assert all(j["cpus"] == "2" for j in by_rule["pair"]), by_rule["pair"]
    assert [j["partition"] for j in by_rule["generate"]] == ["gpu"]
    assert all(j["partition"] == "debug" for j in by_rule["make"] + by_rule["pair"])


KILLABLE = textwrap.dedent(
    """
    rule all:
        input: "slow.txt", "quick.txt"

    rule quick:
        output: "quick.txt"
        shell: "echo quick > {output}"

    # a partial output first, then work: a killed attempt leaves a half-written file behind
    # (only the first attempt works long enough to be killed; the retry finishes at once)
    rule slow:
        output: "slow.txt"
        shell:
            "echo $SLURM_JOB_ID >> attempts.txt; echo partial > {output}; "
            "touch started.$SLURM_JOB_ID; [ $(wc -l < attempts.txt) -gt 1 ] || sleep 20; "
            "echo complete >> {output}"
    """
)


def test_killed_slurm_job_is_retried(slurm_cluster, tmp_path):
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(KILLABLE)
    since = sacct_time()
    cmd, env = snakemake_on_slurm(tmp_path, snakefile)
    with open(tmp_path / "snakemake.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            job = wait_for_job(lambda j: j["rule"] == "slow" and j["state"] == "RUNNING", timeout=300)
            assert job is not None, "no running job of rule slow in squeue"
            deadline = time.monotonic() + 120  # the rule's shell is mid-run
            while not (tmp_path / f"started.{job['id']}").exists():
                assert time.monotonic() < deadline and proc.poll() is None, "slow never started"
                time.sleep(0.3)
            killed = kill_job_tasks(job["id"])
            assert killed
            returncode = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = (tmp_path / "snakemake.log").read_text()
    assert returncode == 0, output[-6000:]

    # the first attempt died half-way; the retry rewrote the output whole
    assert (tmp_path / "slow.txt").read_text() == "partial\ncomplete\n"
    attempts = (tmp_path / "attempts.txt").read_text().split()
    assert attempts[0] == job["id"] and len(attempts) == 2, attempts

    jobs = [j for j in sacct_jobs(since, run_id=slurm_run_id(output)) if j["rule"] == "slow"]
    assert [j["id"] for j in jobs] == attempts, jobs
    assert [j["state"] for j in jobs] == ["FAILED", "COMPLETED"], jobs


# -- the workflow itself ----------------------------------------------------------------------


def wait_for_score_job_and_kill(deadline: float, proc) -> str | None:
    """Wait for a running score_shard job and kill its processes (the job ends FAILED)."""
    while time.monotonic() < deadline and proc.poll() is None:
        job = wait_for_job(lambda j: j["rule"] == "score_shard" and j["state"] == "RUNNING", timeout=5)
        if job:
            try:
                kill_job_tasks(job["id"], timeout=30)
            except AssertionError:
                continue  # it finished before its step could be killed: take the next one
            return job["id"]
    return None


@pytest.mark.slow
def test_pipeline_on_slurm_survives_a_killed_job_and_matches_local(slurm_cluster, local_run, tmp_path):
    config = e2e_config(tmp_path)
    since = sacct_time()
    cmd, env = snakemake_on_slurm(tmp_path, REPO / "Snakefile", "--configfile", str(config))
    with open(tmp_path / "snakemake.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            killed = wait_for_score_job_and_kill(time.monotonic() + 2400, proc)
            returncode = proc.wait(timeout=3000)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = (tmp_path / "snakemake.log").read_text()
    assert returncode == 0, output[-6000:]
    assert killed is not None, "no score_shard job was seen running"

    jobs = sacct_jobs(since, run_id=slurm_run_id(output))
    states = {j["id"]: j for j in jobs}
    assert states[killed]["state"] == "FAILED", states[killed]
    retried = [j for j in jobs if j["comment"] == states[killed]["comment"] and j["id"] != killed]
    assert retried and retried[-1]["state"] == "COMPLETED", retried
    for rule in ("sft", "rl", "merge", "generate", "score_shard"):
        assert any(j["rule"] == rule and j["state"] == "COMPLETED" for j in jobs), rule
    for rule in ("sft", "rl", "merge", "generate"):
        assert all(j["partition"] == "gpu" for j in jobs if j["rule"] == rule), rule

    for table in ("per_task_pass1.csv", "summary.csv"):
        ours = pd.read_csv(tmp_path / "results" / "tables" / table)
        theirs = pd.read_csv(local_run / "results" / "tables" / table)
        pd.testing.assert_frame_equal(ours, theirs)
    samples = pd.read_csv(tmp_path / "results" / "tables" / "per_sample.csv")
    assert len(samples) == len(pd.read_csv(local_run / "results" / "tables" / "per_sample.csv"))
