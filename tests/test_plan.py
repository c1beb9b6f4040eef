"""chorus.plan.Plan turns the config into jobs: paths, job sizes and params (unit tests;
the workflow-level checks are tests/test_workflow_config.py and test_workflow_params.py)."""

import pytest

from chorus.config import ConfigError
from chorus.plan import Plan, job_settings
from conftest import default_config, experiment_config


def test_paths_are_templates_and_pools_do_not_stutter():
    plan = Plan(default_config())
    # a name "{wildcard}" gives the rule's path template
    assert plan.model_dir("sft", "{stage}") == "results/models/sft/{stage}"
    assert plan.model_dir("base", "base") == plan.built_base_dir == "results/models/base"
    # one folder level per pool, kind and name (no results/eval/eval/...)
    assert plan.pool_dir("eval", "rl", "easy_dense") == "results/eval/rl/easy_dense"
    assert plan.pool_dir() == "results/{pool}/{kind}/{name}"
    assert plan.pool_files("harvest", plan.harvested(), "per_sample.csv") == [
        "results/harvest/rl/easy_dense/per_sample.csv",
        "results/harvest/rl/full_dense/per_sample.csv",
    ]
    assert plan.expert_ids == ["rl/easy_dense", "rl/full_dense"]
    config = default_config()
    config["run_name"] = "ablation"
    assert Plan(config).pool_dir("harvest", "rl", "e") == "results/ablation/harvest/rl/e"


def test_threads_and_resources_come_from_config_resources():
    config = default_config()
    config["resources"]["gpu_job"].update(gpu=2, cpus=12, mem_mb=1000, runtime=30, partition="gpu")
    plan = Plan(config)
    assert plan.threads("gpu_job") == 12
    resources = plan.resources("gpu_job")
    assert resources["gpu"] == 2 and resources["slurm_partition"] == "gpu"
    # a retry gets more memory and time
    assert resources["mem_mb"](None, 1) == 1000 and resources["mem_mb"](None, 3) == 3000
    assert resources["runtime"](None, 2) == 60
    light = plan.resources("light_job")
    assert "gpu" not in light and "slurm_partition" not in light
    assert plan.base_model_job == "light_job"  # the tiny model
    config["model"]["base"] = "smollm2-135m"
    assert Plan(config).base_model_job == "sim_job"  # a preset, dequantized in memory


def test_params_leave_out_what_changes_no_result():
    """Checkpoint interval and compile cache are no params: the jobs read them at run time."""
    config = default_config()
    config["compile_cache"] = "/shared/cache"
    plan = Plan(config)
    assert "compile_cache" not in plan.launch() and plan.launch()["device"] == config["device"]
    assert "save_steps" not in plan.sft_settings() and "save_steps" not in plan.expert("easy_dense")
    assert "nice" not in plan.simulation() and "shards" not in plan.simulation()
    # the job adds them at run time from the config, and the nulls its params leave out
    params = {"expert": plan.expert("easy_dense"), "launch": plan.launch(), "simulation": plan.simulation(),
              "stage": plan.stage("easy"), "sampling": plan.sampling(), "seed": 3}
    job = job_settings(params, config)
    assert job["expert"]["save_steps"] == config["rl"]["save_steps"] and job["launch"]["compile_cache"] == "/shared/cache"
    assert job["stage"]["save_steps"] == config["sft"]["save_steps"] and job["seed"] == 3
    assert job["simulation"] == {**plan.simulation(), "nice": config["simulation"]["nice"]}
    assert "steps_per_generation" not in plan.expert("easy_dense") and job["expert"]["steps_per_generation"] is None
    assert "batch_size" not in plan.sampling() and job["sampling"]["batch_size"] is None
    config["rl"]["steps_per_generation"] = 4
    assert job_settings({"expert": Plan(config).expert("easy_dense")}, config)["expert"]["steps_per_generation"] == 4
    assert plan.distill_stage() == {
        "name": "distill",
        "epochs": config["consolidate"]["epochs"],
        "lr": config["consolidate"]["lr"],
        "seed": config["sft"]["seed"],
    }
    assert plan.distill_rl_expert() == {**plan.expert("easy_dense"), "name": "distill_rl"}
    assert plan.pool("eval") == {"splits": config["eval"]["splits"], "k": config["eval"]["k"]}
    assert plan.pool("harvest") == {"splits": ["train"], "k": config["consolidate"]["samples_per_task"]}
    harvest = plan.harvest_settings()
    assert harvest["seeds"] == {e: plan.eval_seed("rl", e) for e in ("easy_dense", "full_dense")}
    assert harvest["limits"] == plan.simulation()


def test_unknown_synth_family_fails_naming_the_key():
    config = default_config()
    config["synth"].update(enabled=True, families=["sequential_nope"])
    with pytest.raises(ConfigError, match=r"synth.families: .*sequential_nope"):
        Plan(config)


def test_optional_settings_enter_params_only_when_set():
    """rl.steps_per_generation, rl.top_p, rl.grad_accum, rl.time_budget_s and
    eval.batch_size, null by default, are no params then (runs made before they existed
    re-run nothing) and are params once set (they change results)."""
    config = default_config()
    plan = Plan(config)
    assert not {"steps_per_generation", "top_p", "grad_accum", "time_budget_s"} & set(plan.expert("easy_dense"))
    assert "batch_size" not in plan.sampling() and plan.sampling()["sampler"] == config["eval"]["sampler"]
    config["rl"]["steps_per_generation"] = 4
    config["eval"]["batch_size"] = 256
    config["rl"]["top_p"] = 0.8
    config["rl"]["grad_accum"] = 2
    config["rl"]["time_budget_s"] = 600
    plan = Plan(config)
    expert = plan.expert("full_dense")
    assert (expert["steps_per_generation"], expert["top_p"], expert["grad_accum"]) == (4, 0.8, 2)
    assert expert["time_budget_s"] == 600
    assert plan.sampling()["batch_size"] == 256 and plan.harvest_settings()["sampling"]["batch_size"] == 256


def test_comparisons_follow_the_experiment_from_base_to_consolidation():
    """The reproduction's questions as pairs: every stage against the model it starts
    from, every expert against its stage, dense against binary from the same stage, the
    oracle and every merge and the distilled model against the best expert."""
    from chorus.report import BEST_EXPERT, ORACLE

    pairs = Plan(experiment_config()).comparisons()
    assert [p for p in pairs if p[0] == "stage"] == [
        ("stage", "sft/program", "base/base"), ("stage", "sft/easy", "sft/program"), ("stage", "sft/full", "sft/easy"),
        ("stage", "rl/program_dense", "sft/program"), ("stage", "rl/easy_dense", "sft/easy"),
        ("stage", "rl/full_dense", "sft/full"), ("stage", "rl/full_binary", "sft/full")]
    assert [p for p in pairs if p[0] == "reward"] == [("reward", "rl/full_dense", "rl/full_binary")]
    assert ("complementarity", ORACLE, BEST_EXPERT) in pairs
    assert [p[1] for p in pairs if p[0] == "consolidation"] == [
        "merge/linear", "merge/task_arithmetic", "merge/ties", "merge/dare_ties", "merge/slerp", "consolidated/distill"]
