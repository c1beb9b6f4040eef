"""Access to the local Slurm cluster started by .ci/slurm/start_cluster.sh, for tests that
run Snakemake through profiles/slurm-ci.

  require_slurm() / the ``slurm_cluster`` fixture   skip without a cluster; FAIL instead when
                                                     CHORUS_REQUIRE_SLURM=1 (CI sets it)
  sacct_jobs(since, run_id=None)                    accounting records (one per job)
  squeue_jobs()                                     jobs still queued or running
  wait_for_job(predicate, timeout)                  first queued/running job matching predicate
  kill_job_tasks(job_id)                            kill -9 the job's task processes (not scancel:
                                                     see below) so the job ends FAILED
  snakemake_on_slurm(workdir, snakefile, ...)       the command line and env for a profile run
  slurm_run_id(log_text)                            the plugin's run id (= sbatch --job-name)

The plugin (snakemake-executor-plugin-slurm 2.8.0) names every job after the run id and
sets its comment to ``rule_<rule>`` or ``rule_<rule>_wildcards_<values>``; sacct keeps the
comment because slurm.conf has AccountingStoreFlags=job_comment.

Why not scancel: sacct reports a cancelled job as ``CANCELLED by <uid>``; plugin 2.8.0 only
recognises the exact word ``CANCELLED`` and waits for such a job forever. A job whose
processes die (crash, OOM kill) ends ``FAILED``, which the plugin reports, and Snakemake
then retries it.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CI_PROFILE = REPO / "profiles" / "slurm-ci"
REQUIRE_ENV = "CHORUS_REQUIRE_SLURM"
START_HINT = "start it as root with: bash .ci/slurm/start_cluster.sh"
UP_STATES = ("idle", "mixed", "allocated", "completing")


def _run(cmd: list[str], timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def slurm_problem() -> str | None:
    """None when the cluster answers and can run and account jobs, else what is wrong."""
    for tool in ("sinfo", "sbatch", "squeue", "sacct", "scontrol"):
        if not shutil.which(tool):
            return f"'{tool}' is not installed"
    try:
        info = _run(["sinfo", "-h", "-N", "-o", "%N|%T"])
        if info.returncode != 0:
            return f"sinfo failed: {info.stderr.strip() or info.stdout.strip()}"
        states = [line.split("|", 1)[1] for line in info.stdout.splitlines() if "|" in line]
        if not any(state.rstrip("*~#") in UP_STATES for state in states):
            return f"no node is up (sinfo: {info.stdout.strip() or 'no nodes'})"
        acct = _run(["sacct", "-n", "-X", "-S", "now-1minutes", "-o", "JobID"])
        if acct.returncode != 0:
            return f"sacct (job accounting) fails: {acct.stderr.strip()}"
    except subprocess.TimeoutExpired as err:
        return f"'{' '.join(err.cmd)}' did not answer within {err.timeout}s"
    return None


def slurm_available() -> bool:
    """sinfo answers, a node is up, and sacct answers."""
    return slurm_problem() is None


def require_slurm() -> None:
    """Skip without a cluster, unless CI demands one (CHORUS_REQUIRE_SLURM=1): then fail."""
    problem = slurm_problem()
    if problem is None:
        return
    message = f"no usable Slurm cluster: {problem} ({START_HINT})"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{message}; {REQUIRE_ENV}=1 requires it", pytrace=False)
    pytest.skip(message)


@pytest.fixture
def slurm_cluster() -> dict:
    """The running local cluster: its partitions and the CI profile to submit with."""
    require_slurm()
    parts = _run(["sinfo", "-h", "-o", "%R"]).stdout.split()
    return {"partitions": parts, "profile": CI_PROFILE}


def sacct_time(moment: datetime.datetime | None = None) -> str:
    """A time for sacct --starttime, one second early to be safe about rounding."""
    moment = (moment or datetime.datetime.now()) - datetime.timedelta(seconds=1)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def _rule_of(comment: str) -> str:
    match = re.match(r"(?:rule|group)_(.+?)(?:_wildcards_(.*))?$", comment)
    return match.group(1) if match else ""


def sacct_jobs(since: str, run_id: str | None = None) -> list[dict]:
    """Accounting records of jobs since ``since`` (sacct time, e.g. 2026-12-03T07:00:00),
    allocations only, oldest first. Each: id, name, state (first word: CANCELLED for
    'CANCELLED by 0'), state_raw, comment, rule (from the plugin's comment), account,
    partition, cpus, exit_code."""
    cmd = ["sacct", "-X", "-n", "-P", "-S", since, "-E", "now",
           "-o", "JobIDRaw,JobName%200,State,Comment%300,Account,Partition,AllocCPUS,ExitCode"]
    if run_id:
        cmd += ["--name", run_id]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=30).stdout
    keys = ("id", "name", "state_raw", "comment", "account", "partition", "cpus", "exit_code")
    jobs = []
    for line in out.splitlines():
        if not line.strip():
            continue
        job = dict(zip(keys, line.split("|")))
        job["state"] = job["state_raw"].split()[0] if job["state_raw"] else ""
        job["rule"] = _rule_of(job["comment"])
        jobs.append(job)
    return sorted(jobs, key=lambda j: int(re.sub(r"\D.*", "", j["id"]) or 0))


def squeue_jobs() -> list[dict]:
    """Jobs queued or running now: id, name, state (RUNNING, PENDING, ...), comment, rule."""
    out = _run(["squeue", "-h", "-o", "%i|%j|%T|%k"]).stdout
    jobs = []
    for line in out.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4:
            job = dict(zip(("id", "name", "state", "comment"), parts))
            job["rule"] = _rule_of(job["comment"])
            jobs.append(job)
    return jobs


def wait_for_job(predicate: Callable[[dict], bool], timeout: float, poll: float = 0.5) -> dict | None:
    """The first job in squeue for which predicate(job) holds, or None after timeout s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for job in squeue_jobs():
            if predicate(job):
                return job
        time.sleep(poll)
    return None


def job_task_pids(job_id: str) -> list[int]:
    """PIDs of the job's task processes (its job steps, not the batch script) on this node."""
    out = _run(["scontrol", "listpids", str(job_id)]).stdout
    pids = []
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[0].isdigit() and fields[2] != "batch":
            pids.append(int(fields[0]))
    return pids


def kill_job_tasks(job_id: str, timeout: float = 60) -> list[int]:
    """SIGKILL the processes of the job's steps, as a crash or the OOM killer would; the
    job then ends FAILED (not CANCELLED: see the module docstring). Waits until its step
    has started; returns the PIDs killed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = job_task_pids(job_id)
        if pids:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return pids
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} started no step within {timeout}s: nothing to kill")


def snakemake_on_slurm(workdir: Path, snakefile: Path, *args: str,
                       profile: Path = CI_PROFILE) -> tuple[list[str], dict]:
    """Command and environment to run ``snakefile`` in ``workdir`` through the profile.
    Snakemake must run outside any SLURM job: SLURM_* variables are dropped."""
    cmd = [str(BIN / "snakemake"), "--profile", str(profile), "-s", str(snakefile),
           "--directory", str(workdir), *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return cmd, env


def slurm_run_id(log_text: str) -> str:
    """The plugin's run id, logged as 'SLURM run ID: <uuid>' and used as every job's name."""
    match = re.search(r"SLURM run ID: (\S+)", log_text)
    assert match, "the Snakemake log names no 'SLURM run ID' (was the slurm executor used?)"
    return match.group(1)
