"""A training job killed mid-run (a preempted node) resumes from its last checkpoint when
the workflow is run again, and never leaves an output that looks complete."""

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from conftest import BIN, REPO, e2e_config, run_snakemake

from chorus.training import last_checkpoint, work_dir_for

EXPERT = "easy_dense"
STEPS = 6


def snakemake_command(workdir, config_path, *extra):
    return [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), f"results/models/rl/{EXPERT}",
            "--cores", "2", "--directory", str(workdir), "--configfile", str(config_path), *extra]


def complete_checkpoint_steps(work_dir):
    """Steps of the checkpoints whose trainer_state.json (written last) is there; unlike
    last_checkpoint it removes nothing, so it may look while the trainer writes."""
    return [int(p.parent.name.rsplit("-", 1)[1]) for p in work_dir.glob("checkpoint-*/trainer_state.json")]


@pytest.mark.slow
def test_killed_rl_job_resumes_from_its_checkpoint(tmp_path):
    config_path = e2e_config(tmp_path)
    config = yaml.safe_load(config_path.read_text())
    config["rl"].update(steps=STEPS, save_steps=1)
    config["synth"]["enabled"] = False  # the corpus has its own tests; the RL job is the subject
    # the expert starts from the first SFT stage: one SFT job before the RL job is enough
    next(e for e in config["rl"]["experts"] if e["name"] == EXPERT)["from_stage"] = config["sft"]["stages"][0]["name"]
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    expert = tmp_path / "results" / "models" / "rl" / EXPERT
    work = work_dir_for(expert)

    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen(snakemake_command(tmp_path, config_path), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        # a complete GRPO checkpoint at step 2 or later (save_total_limit drops old ones),
        # then SIGKILL the whole job like a lost node
        while max(complete_checkpoint_steps(work), default=0) < 2:
            assert proc.poll() is None, "the workflow ended before the RL job was killed"
            assert time.monotonic() < deadline, "no RL checkpoint appeared"
            time.sleep(0.2)
    finally:  # the preemption; on a failed wait above, the cleanup
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not expert.exists()  # nothing that looks like a finished expert
    killed_at = last_checkpoint(work)
    assert killed_at is not None and int(killed_at.rsplit("-", 1)[1]) < STEPS

    # what a user does after a preempted run: unlock, run again
    run_snakemake(["--unlock", "--directory", str(tmp_path), "--configfile", str(config_path)])
    proc = run_snakemake(snakemake_command(tmp_path, config_path, "--rerun-incomplete")[3:], timeout=900)
    assert "rule rl:" in proc.stdout + proc.stderr
    metrics = json.loads((expert / "rl_metrics.json").read_text())
    # the checkpoint the kill left behind (the rule names it relative to the workdir)
    assert Path(metrics["resumed_from"]).name == Path(killed_at).name
    assert int(Path(killed_at).name.rsplit("-", 1)[1]) >= 2
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
