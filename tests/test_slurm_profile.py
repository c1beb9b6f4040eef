"""The documented Slurm commands give every GPU rule its GPU, partition, CPUs, memory and
time: the README's quick start, docs/slurm.md's commands and every make target that
submits through profiles/slurm are dry-run exactly as written (in a copy of the repository, after the README's own edit of
the profile) and the planned jobs' resources are checked against config/slurm.yaml.

A dry run with the slurm executor needs no cluster: nothing is submitted."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

import pytest
import yaml

from conftest import BIN, REPO

pytestmark = pytest.mark.slow  # a workflow dry-run each

# rule -> its kind in config.resources (the rules' `resources: **PLAN.resources(kind)`)
GPU_RULES = {
    "sft": "gpu_job",
    "consolidate_sft": "gpu_job",
    "merge": "gpu_job",
    "generate": "gpu_job",
    "rl": "rl_job",
    "consolidate_rl": "rl_job",
}
# what the README's sed writes into the profile
ACCOUNT, CPU_PARTITION, GPU_PARTITION = "my_account", "cpu", "gpu"


def readme_slurm_commands() -> list[str]:
    """The shell lines of the README's "Running on a SLURM cluster" code block."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Running on a SLURM cluster", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def slurm_doc_commands() -> list[str]:
    """The snakemake lines with the profile in docs/slurm.md's code blocks."""
    text = (REPO / "docs" / "slurm.md").read_text()
    lines = [line.split("  #")[0].strip() for block in re.findall(r"```\w*\n(.*?)```", text, re.S)
             for line in block.splitlines()]
    return [line for line in lines if re.search(r"snakemake --profile profiles/slurm(\s|$)", line)]


def submitting_make_commands(workdir) -> dict[str, str]:
    """target -> the snakemake command line (as `make -n` prints it) of every Makefile
    target whose recipe runs the workflow through profiles/slurm."""
    makefile = (REPO / "Makefile").read_text()
    targets = re.findall(r"^([\w-]+):[^=\n]*\n((?:\t.*\n?)+)", makefile, re.M)
    commands = {}
    for target, recipe in targets:
        if "--profile profiles/slurm" not in recipe:
            continue
        printed = subprocess.run(["make", "-n", target], cwd=workdir, capture_output=True, text=True, check=True)
        (line,) = [l for l in printed.stdout.splitlines() if "--profile profiles/slurm" in l]
        commands[target] = line
    return commands


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A copy of the working tree (tracked and new files) with the README's edits applied."""
    workdir = tmp_path_factory.mktemp("checkout")
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            target = workdir / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    (workdir / ".venv").symlink_to(BIN.parent)
    edits = [c for c in readme_slurm_commands() if c.startswith("sed ")]
    assert edits, "the README quick start edits the profile"
    for edit in edits:
        subprocess.run(edit, shell=True, cwd=workdir, check=True)
    return workdir


def dry_run(command: str, workdir) -> dict[str, list[dict]]:
    """rule -> the planned jobs' threads and resources of `command -n`. A dry run caps
    threads at --cores (1 unless given); on the cluster nothing caps them, so the dry run
    gets a large --cores to show the threads the jobs ask for."""
    args = shlex.split(command)
    assert args[0].endswith("snakemake"), command
    proc = subprocess.run(
        [str(BIN / "snakemake"), *args[1:], "-n", "--cores", "1000"],
        cwd=workdir, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs: dict[str, list[dict]] = {}
    for rule, body in re.findall(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)", proc.stdout, re.M):
        threads = re.search(r"^    threads: (\d+)", body, re.M)
        resources = re.search(r"^    resources: (.*)", body, re.M)
        entries = dict(item.split("=", 1) for item in resources.group(1).split(", ")) if resources else {}
        jobs.setdefault(rule, []).append({"threads": int(threads.group(1)) if threads else 1, **entries})
    return jobs


def expected_sizes() -> dict:
    return yaml.safe_load((REPO / "config" / "slurm.yaml").read_text())["resources"]


def assert_cluster_resources(jobs: dict[str, list[dict]], command: str) -> None:
    sizes = expected_sizes()
    assert {"sft", "rl", "generate", "merge"} <= set(jobs), f"{command}: {sorted(jobs)}"
    for rule, kind in GPU_RULES.items():
        for job in jobs.get(rule, []):
            where = f"{command}: rule {rule}"
            assert job.get("slurm_partition") == GPU_PARTITION, where
            assert job.get("slurm_account") == ACCOUNT, where
            assert int(job.get("gpu", 0)) == sizes[kind]["gpu"] >= 1, where
            assert job["threads"] == sizes[kind]["cpus"], where
            assert int(job["mem_mb"]) == sizes[kind]["mem_mb"], where
            assert int(job["runtime"]) == sizes[kind]["runtime"], where
    for job in jobs["score_shard"]:  # the CPU jobs: CPU partition, no GPU
        assert job["slurm_partition"] == CPU_PARTITION and "gpu" not in job, command
        assert job["threads"] == sizes["sim_job"]["cpus"], command
        assert int(job["mem_mb"]) == sizes["sim_job"]["mem_mb"], command


def test_readme_quick_start_gives_gpu_rules_their_resources(checkout):
    runs = [c for c in readme_slurm_commands() if "snakemake" in c and "--profile profiles/slurm" in c]
    assert runs, "the README quick start runs snakemake with the profile"
    for command in runs:
        assert_cluster_resources(dry_run(command.replace(" -n", ""), checkout), command)


def test_docs_slurm_commands_give_gpu_rules_their_resources(checkout):
    runs = slurm_doc_commands()
    assert runs, "docs/slurm.md shows the commands"
    for command in runs:
        assert_cluster_resources(dry_run(command.replace(" -n", ""), checkout), command)


def test_make_targets_that_submit_give_gpu_rules_their_resources(checkout):
    commands = submitting_make_commands(checkout)
    assert "experiment-slurm" in commands
    for target, command in commands.items():
        assert_cluster_resources(dry_run(command, checkout), f"make {target}")


def test_profile_is_the_one_place_to_edit():
    """Every placeholder a user must replace is in the profile; config/slurm.yaml has none."""
    profile = (REPO / "profiles" / "slurm" / "config.yaml").read_text()
    for placeholder in ("YOUR_ACCOUNT", "YOUR_CPU_PARTITION", "YOUR_GPU_PARTITION"):
        assert placeholder in profile
    assert "YOUR_" not in (REPO / "config" / "slurm.yaml").read_text()
    # the GPU partition is written once (one anchor), not once per rule
    assert profile.count("YOUR_GPU_PARTITION\"") == 1
