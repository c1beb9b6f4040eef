"""The config is checked at start-up: schema errors and inconsistent names fail at once."""

import copy

import pytest

from chorus.plan import ConfigError, Plan
from conftest import default_config, run_snakemake, write_config


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["sft"].update(bogus=1), "bogus"),
        (lambda c: c["eval"].update(k="four"), "four"),
        (lambda c: c["merge"]["strategies"][0].update(method="average"), "average"),
        (lambda c: c.update(device="tpu"), "tpu"),
        (lambda c: c.update(train_processes="many"), "many"),
        (lambda c: c["rl"].update(save_steps=0), "save_steps"),
        (lambda c: c["sft"].update(liger_kernel="sometimes"), "sometimes"),
    ],
)
def test_schema_rejects_bad_config_naming_the_key(tmp_path, mutate, expected):
    config = default_config()
    mutate(config)
    path = write_config(tmp_path / "bad.yaml", config)
    proc = run_snakemake(["-n", "--nolock", "--configfile", str(path)], check=False)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "ValidationError" in output or "validat" in output.lower()
    assert expected in output


def test_plan_rejects_unknown_references():
    config = default_config()
    broken = copy.deepcopy(config)
    broken["rl"]["experts"][0]["from_stage"] = "nope"
    with pytest.raises(ConfigError, match=r"rl.experts\[0\].from_stage"):
        Plan(broken)
    broken = copy.deepcopy(config)
    broken["merge"]["strategies"][4]["experts"] = ["easy_dense", "ghost"]
    with pytest.raises(ConfigError, match="ghost"):
        Plan(broken)
    broken = copy.deepcopy(config)
    broken["merge"]["strategies"][0]["method"] = "slerp"
    broken["rl"]["experts"].append({"name": "third", "from_stage": "full"})
    with pytest.raises(ConfigError, match="slerp merges exactly two"):
        Plan(broken)
    broken = copy.deepcopy(config)
    broken["sft"]["stages"].append(dict(broken["sft"]["stages"][0]))
    with pytest.raises(ConfigError, match="duplicate"):
        Plan(broken)


def test_plan_paths_and_merge_base():
    plan = Plan(default_config())
    assert plan.previous_stage("format") is None
    assert plan.previous_stage("easy") == "format"
    assert plan.model_dir("rl", "easy_dense") == "results/models/rl/easy_dense"
    # task vectors are taken against the latest stage any merged expert started from
    assert plan.merge_base_stage("linear") == "full"
    ids = [m.id for m in plan.models()]
    assert ids[0] == "base/base" and "consolidated/distill" in ids
