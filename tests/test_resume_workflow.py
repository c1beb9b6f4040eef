"""A training job killed mid-run (a preempted node) resumes from its last checkpoint when
the workflow is run again, and never leaves an output that looks complete."""

import json
import os
import signal
import subprocess
import time

import yaml

from chorus.sft import last_checkpoint, work_dir_for
from conftest import BIN, REPO, e2e_config, run_snakemake

EXPERT = "easy_dense"
STEPS = 6


def snakemake_command(workdir, config_path, *extra):
    return [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), f"results/models/rl/{EXPERT}",
            "--cores", "2", "--directory", str(workdir), "--configfile", str(config_path), *extra]


def test_killed_rl_job_resumes_from_its_checkpoint(tmp_path):
    config_path = e2e_config(tmp_path)
    config = yaml.safe_load(config_path.read_text())
    config["rl"].update(steps=STEPS, save_steps=1)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    expert = tmp_path / "results" / "models" / "rl" / EXPERT
    work = work_dir_for(expert)

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(snakemake_command(tmp_path, config_path), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        # two complete GRPO checkpoints, then SIGKILL the whole job like a lost node
        while not ((work / "checkpoint-2" / "trainer_state.json").is_file() and proc.poll() is None):
            assert proc.poll() is None, "the workflow ended before the RL job was killed"
            assert time.monotonic() < deadline, "no RL checkpoint appeared"
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert not expert.exists()  # nothing that looks like a finished expert
    killed_at = last_checkpoint(work)
    assert killed_at is not None and int(killed_at.rsplit("-", 1)[1]) < STEPS

    # what a user does after a preempted run: unlock, run again
    run_snakemake(["--unlock", "--directory", str(tmp_path), "--configfile", str(config_path)])
    proc = run_snakemake(snakemake_command(tmp_path, config_path, "--rerun-incomplete")[3:], timeout=900)
    assert "rule rl:" in proc.stdout + proc.stderr
    metrics = json.loads((expert / "rl_metrics.json").read_text())
    assert metrics["resumed_from"] is not None
    assert int(metrics["resumed_from"].rsplit("-", 1)[1]) >= 2
    assert metrics["steps"] == STEPS
    assert not work.exists()  # checkpoints are dropped once the expert is in place
    # the stages before RL were not retrained
    assert "rule sft:" not in proc.stdout + proc.stderr


def test_an_incomplete_checkpoint_is_never_resumed(tmp_path):
    """transformers writes trainer_state.json last: a newer checkpoint without it was cut
    short and is removed; the newest complete one is resumed."""
    for step, complete in ((2, True), (3, True), (4, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"weights")
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-3")
    assert not (tmp_path / "checkpoint-4").exists()
    assert last_checkpoint(tmp_path / "missing") is None
