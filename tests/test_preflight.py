"""The preflight (issue 13): before any candidate is scored, the harness must score every
task's reference stimulus as passing and its trivial stimulus as failing, here, with the
scoring jobs' sandbox settings; otherwise the run stops with one message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import FIXTURE_TASK, REPO, default_config, run_snakemake, write_config
from foreign_env import force_old_guard, foreign_python_env

from chorus.cli import score_main
from chorus.plan import POOLS

SHIPPED = REPO / "tasks" / "ecov" / "up_counter"  # the task of the reproduction


@pytest.mark.slow
def test_selfcheck_passes_on_shipped_tasks(capsys):
    assert score_main(["--selfcheck", "--tasks", str(FIXTURE_TASK), str(SHIPPED), "--workers", "2"]) == 0
    assert "selfcheck passed: 4 stimuli of 2 tasks" in capsys.readouterr().err


@pytest.mark.slow
def test_selfcheck_catches_the_foreign_python_failure(monkeypatch, capsys):
    """The environment of issue 13 (a pytest plugin that imports ctypes): with the guard
    as it was, every reference failed, and the selfcheck says so in one message naming
    the task, the status and the detail; with the guard as it is, it passes."""
    with foreign_python_env():
        assert score_main(["--selfcheck", "--tasks", str(FIXTURE_TASK), "--workers", "2"]) == 0
        capsys.readouterr()
        force_old_guard(monkeypatch)
        assert score_main(["--selfcheck", "--tasks", str(FIXTURE_TASK), "--workers", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("preflight failed: 2 of 2 checks")
    assert "task fx_counter: reference stimulus should pass, got status runtime_error" in err
    assert "task fx_counter: trivial stimulus should fail with below_target, got status runtime_error" in err
    assert "ctypes is not allowed in stimulus" in err


def _planted_task_root(tmp_path: Path) -> Path:
    """The fixture task whose reference stimulus is its trivial one: it cannot pass."""
    root = tmp_path / "tasks"
    shutil.copytree(FIXTURE_TASK, root / "fx_counter")
    stimulus = root / "fx_counter" / "stimulus"
    shutil.copy(stimulus / "trivial.py", stimulus / "reference.py")
    return root


@pytest.mark.slow
def test_the_workflow_stops_before_scoring_and_rl_on_a_failed_preflight(tmp_path):
    config = default_config()
    config["tasks"]["root"] = str(_planted_task_root(tmp_path))
    config["synth"]["enabled"] = False  # the preflight is the subject; it needs no corpus (24 builds)
    path = write_config(tmp_path / "config.yaml", config)
    args = ["--cores", "2", "--directory", str(tmp_path), "--configfile", str(path)]
    plan = run_snakemake(["-n", *args])
    # every scoring, RL and SFT data job waits for the preflight
    assert "rule preflight" in plan.stdout + plan.stderr
    proc = run_snakemake(args, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Error in rule preflight" in output
    assert "task fx_counter: reference stimulus should pass, got status below_target" in output
    assert output.count("preflight failed:") == 1  # one message, not one per job
    for rule in ("score_shard", "rl", "consolidate_rl", "generate", "sft_data", "sft"):
        assert f"rule {rule}:" not in output and f"localrule {rule}:" not in output, rule
    for pool in POOLS:
        assert not list((tmp_path / "results" / pool).glob("*/*/scores/*")), pool
    assert not (tmp_path / "results" / "models" / "rl").exists()


@pytest.mark.slow
def test_the_preflight_rule_passes_and_records_its_checks(tmp_path):
    import json

    root = tmp_path / "tasks"
    shutil.copytree(FIXTURE_TASK, root / "fx_counter")
    config = default_config()
    config["tasks"]["root"] = str(root)
    config["synth"]["enabled"] = False  # the subject is the rule; preflight_tasks has its own test
    path = write_config(tmp_path / "config.yaml", config)
    run_snakemake(["results/preflight/selfcheck.json", "--cores", "2", "--directory", str(tmp_path),
                   "--configfile", str(path)])
    report = json.loads((tmp_path / "results" / "preflight" / "selfcheck.json").read_text())
    assert report["checks"] == 2 and all(r["ok"] for r in report["results"])
    assert {(r["stimulus"], r["status"]) for r in report["results"]} == {("reference", "ok"), ("trivial", "below_target")}


def test_the_preflight_checks_shipped_tasks_and_one_synthetic_task_per_family():
    import dataclasses

    from chorus.harness.preflight import preflight_tasks
    from chorus.tasks import load_task

    shipped = load_task(FIXTURE_TASK)
    synthetic = [
        dataclasses.replace(shipped, id=f"syn_{family}_{i}", source="synthetic", family=family)
        for family in ("fifo", "alu") for i in range(3)
    ]
    chosen = preflight_tasks([shipped, *synthetic])
    assert [t.id for t in chosen] == ["fx_counter", "syn_fifo_0", "syn_alu_0"]
