"""Snakemake on a real Slurm cluster through profiles/slurm-ci: the plugin submits every job
with sbatch and reads its state from sacct (slurmdbd accounting). The local one-node
cluster comes from .ci/slurm/start_cluster.sh; without it these tests skip, or fail when
CHORUS_REQUIRE_SLURM=1 (CI)."""

import shutil
import subprocess
import textwrap
import time
from collections import Counter

import pandas as pd
import pytest
import yaml

from chorus.plan import Plan

from conftest import REPO
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


# the Slurm test re-creates the chain from the last SFT stage to this merge's scores
CHAIN_MERGE = "linear"
SAMPLE_COLUMNS = ["model", "task_id", "sample_id", "passed", "score", "status", "completion_sha256"]


def copy_without_model_chain(local_run, workdir) -> tuple[Plan, str]:
    """A copy of the local run (outputs, times and Snakemake's records) without the chain
    that ends in CHAIN_MERGE's evaluation: the last SFT stage's checkpoint, the experts
    trained from it, the merge, its samples and scores. Everything else stays up to date,
    so a run of the returned target re-creates exactly the chain."""
    shutil.copytree(local_run, workdir, symlinks=True)
    plan = Plan(yaml.safe_load((workdir / "config.yaml").read_text()))
    stage = plan.stages[-1]
    experts = [e["name"] for e in plan.config["rl"]["experts"]
               if e["from_stage"] == stage and e["name"] in plan.merge_experts(CHAIN_MERGE)]
    assert experts, f"no expert of merge {CHAIN_MERGE} starts from stage {stage}"
    chain = [plan.model_dir("sft", stage), *(plan.model_dir("rl", e) for e in experts),
             plan.model_dir("merge", CHAIN_MERGE), plan.pool_dir("eval", "merge", CHAIN_MERGE)]
    for folder in chain:
        shutil.rmtree(workdir / folder)
    return plan, f"{plan.pool_dir('eval', 'merge', CHAIN_MERGE)}/per_sample.csv"


@pytest.mark.slow
def test_model_chain_on_slurm_survives_a_killed_job_and_matches_local(slurm_cluster, local_run, tmp_path):
    """Part of the local run again, through the cluster: an SFT stage, an RL expert, a merge,
    sampling and scoring jobs, one scoring job killed mid-run and retried; every sample of
    the merged model ends as it did locally (same completion, verdict and score)."""
    workdir = tmp_path / "run"
    plan, target = copy_without_model_chain(local_run, workdir)
    since = sacct_time()
    cmd, env = snakemake_on_slurm(workdir, REPO / "Snakefile", target, "--configfile", str(workdir / "config.yaml"))
    with open(tmp_path / "snakemake.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            killed = wait_for_score_job_and_kill(time.monotonic() + 1200, proc)
            returncode = proc.wait(timeout=1800)
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
    # exactly the chain ran on the cluster, each job once (bar the killed one)
    completed = Counter(j["rule"] for j in jobs if j["state"] == "COMPLETED")
    assert completed == {"sft": 1, "rl": 1, "merge": 1, "generate": 1, "score_shard": len(plan.shards())}, jobs
    for rule in ("sft", "rl", "merge", "generate"):
        assert all(j["partition"] == "gpu" for j in jobs if j["rule"] == rule), rule

    ours = pd.read_csv(workdir / target)
    theirs = pd.read_csv(local_run / target)
    assert len(ours) == plan.config["eval"]["k"] * ours["task_id"].nunique() > 0
    pd.testing.assert_frame_equal(ours[SAMPLE_COLUMNS], theirs[SAMPLE_COLUMNS])
