"""Access to the local Slurm cluster started by .ci/slurm/start_cluster.sh."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def slurm_available() -> bool:
    if not shutil.which("sinfo") or not shutil.which("sacct"):
        return False
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and any(s in out.stdout for s in ("idle", "mix", "alloc"))


def require_slurm() -> None:
    """Skip without a cluster, unless CI demands one (CHORUS_REQUIRE_SLURM=1): then fail."""
    if slurm_available():
        return
    message = "no Slurm cluster answers (start it with: bash .ci/slurm/start_cluster.sh)"
    if os.environ.get("CHORUS_REQUIRE_SLURM") == "1":
        pytest.fail(message)
    pytest.skip(message)


def sacct_jobs(since: str) -> list[dict]:
    """Jobs (allocations only) since an sacct time like 2026-12-03T07:00:00."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-S", since, "-o", "JobID,JobName,State,Comment,Account"],
        capture_output=True, text=True, check=True,
    ).stdout
    keys = ("id", "name", "state", "comment", "account")
    return [dict(zip(keys, line.split("|"))) for line in out.splitlines() if line.strip()]


def running_jobs() -> list[dict]:
    out = subprocess.run(["squeue", "-h", "-o", "%i|%T|%k"], capture_output=True, text=True).stdout
    return [dict(zip(("id", "state", "comment"), line.split("|"))) for line in out.splitlines() if line]
