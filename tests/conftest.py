"""Shared test helpers: repository paths, a Snakemake runner, and the fast/slow split."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
FIXTURE_TASK = REPO / "tests" / "fixtures" / "tasks" / "fx_counter"  # a small counter design
BIN = Path(sys.executable).parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the smallest model the training tests build (chorus.modeling.build_tiny_model arguments)
TINY_MODEL = dict(hidden_size=32, num_layers=1, num_heads=2, vocab_size=512, max_position_embeddings=2048)


def default_config() -> dict:
    """config/config.yaml, completed with the schema's defaults (as the workflow sees it)."""
    from chorus.config import check_config

    return check_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))


def experiment_config() -> dict:
    """The reproduction's configuration as `make experiment` stacks it: the default, then
    config/gpu.yaml, then config/experiments/smollm2_h200.yaml, each top-level key
    replacing the one before (the keys those files set are whole sections)."""
    config = default_config()
    for path in ("config/gpu.yaml", "config/experiments/smollm2_h200.yaml"):
        config.update(yaml.safe_load((REPO / path).read_text()))
    return config


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def run_snakemake(args: list[str], *, cwd: Path = REPO, timeout: int = 1800, check=True):
    """Run the workflow's Snakefile with the venv's snakemake; returns the CompletedProcess."""
    cmd = [str(BIN / "snakemake"), "-s", str(REPO / "Snakefile"), *args]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc


# -- the fast tier: `make test-fast` runs `pytest -m "not slow"` ------------------------
# slow: a test that starts Slurm or the workflow (dry-runs too), simulates a design in the
# sandbox, builds with Verilator, trains or samples a model. Whole modules of such tests:
SLOW_MODULES = {
    "test_array_score",  # array scoring through the workflow
    "test_benchmarks_smoke",  # corpus, SFT and evaluation end to end
    "test_integrity_outputs",  # every test simulates a hostile candidate
    "test_pipeline_e2e",
    "test_sandbox",  # every test simulates a hostile candidate
    "test_slurm",
    "test_workflow_dag",  # snakemake dry-runs of whole configurations
    "test_workflow_params",  # runs the workflow, then dry-runs changes
}
# ...and fixtures that build, simulate, train or run the workflow: a test using one is slow
SLOW_FIXTURES = {
    "cache",  # the simulation tests of the fixture design
    "local_run",
    "own_cache",
    "sft_job",
    "smollm2",
    "stages",
    "two_models",
    "unprivileged",
    "verdicts",
    "verified",
}


# -- pytest-xdist (make test: -n 2 --dist loadgroup) -----------------------------------
# Each worker builds its own session and module fixtures: the tests of an expensive one go
# to one worker (an xdist_group), so it is built once. The Slurm tests join the local run's
# group: the chain test starts from that run, and the one-node cluster is not shared.
# xdist hands out the groups with the most tests first, one per worker: no other group may
# outnumber the local run's but one, or the longest chain of tests would start late (so
# test_workflow_params's `finished`, ~15 s, 11 tests, is built on each worker).
XDIST_GROUP_FIXTURES = {
    "local_run": "local_run",  # a whole workflow run (~190 s alone, ~390 s beside another worker)
    "verdicts": "task_verdicts",  # test_tasks: every shipped task scored (~20 s, cold ~130 s)
    "verified": "synth_verified",  # test_synth: every family built and simulated (~60 s)
    "smollm2": "smollm2",  # test_models: the preset converted (~20 s)
}
XDIST_GROUP_MODULES = {"test_slurm": "local_run"}


# tryfirst: xdist reads the groups in its own pytest_collection_modifyitems, which would
# otherwise run before this one (pytest-xdist issue 1241)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if item.module else ""
        fixtures = set(getattr(item, "fixturenames", ()))
        if module in SLOW_MODULES or SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        group = XDIST_GROUP_MODULES.get(module) or next(
            (g for f, g in XDIST_GROUP_FIXTURES.items() if f in fixtures), None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Fail, before any fixture, where xdist did not apply an xdist_group (it would build
    the group's fixtures again): it puts the group into the node id, which pytest 9.2 no
    longer lets it change (pytest-xdist issue 1386)."""
    if getattr(item.config.option, "loadgroup", False) and item.get_closest_marker("xdist_group") \
            and "@" not in item.nodeid:
        pytest.fail("pytest-xdist ignored this test's xdist_group: pytest-xdist 1386 (pytest 9.2)", pytrace=False)


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def task():
    """The fixture design (its reference stimulus passes, the trivial one does not)."""
    from chorus.tasks import load_task

    return load_task(FIXTURE_TASK)


@pytest.fixture(scope="session")
def cache():
    return None  # the default cache (.cache/verilator): the sandbox user must read it


# The workflow tests run these shipped tasks, not all 34: every split, and every difficulty
# of the train and test splits (every shipped task passes its own checks in test_tasks.py)
E2E_TASKS = ("edge_detector", "parity_gen", "up_counter", "debouncer", "uart_tx", "cam4",  # train
             "pwm_gen",  # val
             "bcd_counter", "alu8", "combo_lock")  # test


def e2e_config(workdir: Path) -> Path:
    """The embedded default on a copy of the E2E_TASKS in `workdir`/tasks (an absolute
    task root, so any workdir can run it)."""
    config = default_config()
    root = workdir / "tasks"
    for task_id in E2E_TASKS:
        shutil.copytree(REPO / config["tasks"]["root"] / task_id, root / task_id)
    config["tasks"]["root"] = str(root)
    return write_config(workdir / "config.yaml", config)


# The local run is e2e_config made smaller where no test needs more: a quarter of the
# default's synthetic designs (tests/test_synth.py verifies every family) and two of its five
# merges (tests/test_ml.py runs every merge method). Its every stage still runs.
LOCAL_RUN_SYNTH = {"train_designs": 4, "test_designs": 2}
LOCAL_RUN_MERGES = ("linear", "task_arithmetic")


def local_run_config(workdir: Path) -> Path:
    config = yaml.safe_load(e2e_config(workdir).read_text())
    config["synth"].update(LOCAL_RUN_SYNTH)
    config["merge"]["strategies"] = [m for m in config["merge"]["strategies"] if m["name"] in LOCAL_RUN_MERGES]
    return write_config(workdir / "config.yaml", config)


@pytest.fixture(scope="session")
def local_run(tmp_path_factory) -> Path:
    """One full run of the pipeline (local_run_config) with the local executor."""
    workdir = tmp_path_factory.mktemp("local_run")
    config = local_run_config(workdir)
    run_snakemake(
        ["--cores", "2", "--directory", str(workdir), "--configfile", str(config)],
        timeout=3000,
    )
    return workdir


@pytest.fixture(scope="session")
def local_run_report(local_run) -> Path:
    """The Snakemake report of the local run, made once for the tests that read it."""
    out = local_run / "report.html"
    run_snakemake(["--report", str(out), "--directory", str(local_run),
                   "--configfile", str(local_run / "config.yaml")])
    return out


# -- shared by the attack tests (test_integrity_outputs.py, test_cvdp.py) -------------
def run_bounded(fn, timeout_s):
    """fn() in a thread; fails the test instead of hanging it when fn does not return."""
    import threading

    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("value", fn()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the scorer hung"
    return box["value"]


@pytest.fixture
def secret(tmp_path):
    """A root-only file a candidate must never get into a result."""
    path = tmp_path / "shadow"
    path.write_text("root:SECRET-HASH:19000::::::\n")
    path.chmod(0o600)
    return path
