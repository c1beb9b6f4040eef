"""Settings that change no result (shards, simulation niceness, checkpoint interval,
compile cache, report options, job sizes and threads) must not re-run training or
generation; settings that do change results must. The rules' params hold only the
latter (chorus.plan.Plan).

A finished run is stood in for by `snakemake --touch` over placeholder outputs: Snakemake
then records every job's params as if it had run, which is what its params trigger
compares against (a real run of the embedded default costs minutes)."""

import copy
import os
import re

import pytest

from chorus.plan import Plan
from conftest import REPO, default_config, run_snakemake, write_config

# where the workflow's directory() outputs live (models, synthetic corpus shards)
DIRECTORY_OUTPUTS = re.compile(r"/models/|/synth/shards/shard\d+$")
EXPENSIVE = {"sft", "rl", "generate", "merge", "consolidate_sft", "consolidate_rl", "build_base_model"}


def planned(workdir, config) -> dict[str, int]:
    path = write_config(workdir / "config.yaml", config)
    proc = run_snakemake(["-n", "--directory", str(workdir), "--configfile", str(path)])
    counts: dict[str, int] = {}
    for rule in re.findall(r"^(?:local)?rule (\w+):", proc.stdout, flags=re.M):
        counts[rule] = counts.get(rule, 0) + 1
    return counts


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A workdir whose every output exists, with the metadata of a finished run."""
    workdir = tmp_path_factory.mktemp("touched")
    config = default_config()
    config["tasks"]["root"] = str(REPO / config["tasks"]["root"])
    path = write_config(workdir / "config.yaml", config)
    summary = run_snakemake(["--summary", "--directory", str(workdir), "--configfile", str(path)])
    for line in summary.stdout.splitlines()[1:]:
        output = workdir / line.split("\t")[0]
        if DIRECTORY_OUTPUTS.search(str(output)):
            output.mkdir(parents=True, exist_ok=True)
        else:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.touch()
    # --forceall: every job "runs" (is touched) in order, so each gets its metadata
    run_snakemake(["--touch", "--forceall", "--cores", "1", "--directory", str(workdir), "--configfile", str(path)])
    proc = run_snakemake(["-n", "--directory", str(workdir), "--configfile", str(path)])
    assert "Nothing to be done" in proc.stdout and "missing provenance" not in proc.stdout + proc.stderr
    return workdir, config


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["simulation"].update(shards=3),
        lambda c: c["simulation"].update(nice=5),
        lambda c: c["sft"].update(save_steps=7),
        lambda c: c["rl"].update(save_steps=7),
        lambda c: c.update(compile_cache="/elsewhere/cache"),
        lambda c: c["eval"].update(pass_at=[1]),
        lambda c: c["resources"]["gpu_job"].update(mem_mb=9999, partition="gpu"),
        lambda c: [c["resources"][job].update(cpus=3) for job in ("gpu_job", "rl_job", "sim_job", "light_job")],
    ],
    ids=["shards", "simulation.nice", "sft.save_steps", "rl.save_steps", "compile_cache", "pass_at", "resources", "threads"],
)
def test_settings_without_effect_on_results_rerun_no_training(finished, change):
    workdir, config = finished
    changed = copy.deepcopy(config)
    change(changed)
    jobs = planned(workdir, changed)
    assert not EXPENSIVE & set(jobs), jobs


def test_a_result_setting_reruns_what_it_changes(finished):
    """The check above can fail: a learning rate of the RL experts re-plans them, an
    evaluation seed re-plans the evaluation pool's sampling (not the harvest pool's)."""
    workdir, config = finished
    changed = copy.deepcopy(config)
    changed["rl"]["lr"] = 3e-5
    jobs = planned(workdir, changed)
    assert jobs.get("rl") == 2 and "sft" not in jobs
    changed = copy.deepcopy(config)
    changed["eval"]["seed"] = 5
    jobs = planned(workdir, changed)
    # every evaluated model, and the harvest samples of both experts
    assert jobs.get("generate") == len(Plan(config).models()) + 2, jobs
    assert "rl" not in jobs and jobs.get("consolidate_sft") == 1


def test_another_model_base_reruns_what_starts_from_it(finished, tmp_path):
    """model.base is an input of the first SFT stage and of the base model's evaluation:
    pointing it at another model folder re-plans them (and all after them), even when
    that folder is older than the results."""
    workdir, config = finished
    base = tmp_path / "other-model"
    base.mkdir()
    (base / "config.json").write_text("{}")
    for path in (base / "config.json", base):
        os.utime(path, (0, 0))
    changed = copy.deepcopy(config)
    changed["model"]["base"] = str(base)
    jobs = planned(workdir, changed)
    assert jobs.get("sft") == len(config["sft"]["stages"]) and jobs.get("rl") == len(config["rl"]["experts"]), jobs
    assert "build_base_model" not in jobs  # a folder is used as it is


def test_evaluation_rounds_add_rounds_and_train_nothing(finished):
    """eval.rounds above 1 adds round 2 (a generation and its score shards per evaluated
    model) and re-scores the eval pool's round 1, whose rows then carry the feedback; it
    re-samples no round 1, leaves the harvest pool alone and trains nothing. At 1 (the
    default) the finished run is up to date (the fixture)."""
    workdir, config = finished
    changed = copy.deepcopy(config)
    changed["eval"]["rounds"] = 2
    jobs = planned(workdir, changed)
    models = len(Plan(config).models())
    assert jobs.get("generate_round") == models and jobs.get("score_round_shard") == 2 * models, jobs
    assert jobs.get("score_first_round_shard") == 2 * models and jobs.get("gather_rounds") == models, jobs
    assert jobs.get("plot_rounds") == 1, jobs
    assert "score_shard" not in jobs and "gather_scores" not in jobs and not EXPENSIVE & set(jobs), jobs
