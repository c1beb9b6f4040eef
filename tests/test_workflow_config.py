"""The config is checked at start-up: schema errors and inconsistent names fail at once."""

import copy

import pytest

from chorus.config import ConfigError, check_config
from chorus.plan import Plan, checked_plan, replica_group
from conftest import REPO, default_config, run_snakemake, write_config


@pytest.mark.slow  # a snakemake start-up each
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
        (lambda c: c["eval"].update(pass_at=[1, 4]), "eval.pass_at"),
        (lambda c: c.update(run_name="a/b"), "run_name"),
        (lambda c: c.update(seeds=[0, 0]), "seeds"),
        (lambda c: c["model"].update(base="/no/such/models/Qwen2.5-0.5B"), "model.base"),
    ],
)
def test_schema_rejects_bad_config_naming_the_key(tmp_path, mutate, expected):
    config = default_config()
    mutate(config)
    path = write_config(tmp_path / "bad.yaml", config)
    proc = run_snakemake(["-n", "--nolock", "--configfile", str(path)], check=False)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert ("invalid config at" in output or "model.base:" in output) and expected in output
    # one short message, not a dump of the schema and the config
    assert len(output.strip().splitlines()) <= 6, output
    assert "$schema" not in output and "additionalProperties" not in output


def test_schema_is_the_source_of_defaults():
    """A config of only the required keys is completed from the schema's defaults."""
    minimal = {
        "sft": {"stages": [{"name": "s", "mix": {"format": True}, "epochs": 1, "lr": 1e-3}]},
        "rl": {"experts": [{"name": "e", "from_stage": "s"}]},
    }
    config = check_config(copy.deepcopy(minimal))
    assert config["eval"]["pass_at"] == [1] and config["eval"]["seed"] == 0
    assert config["simulation"]["shards"] == 2 and config["resources"]["rl_job"]["partition"] is None
    assert config["rl"]["experts"][0]["reward"] == "dense"
    plan = Plan(config)
    assert plan.expert("e")["seed"] == 0 and plan.stage("s")["seed"] == 0
    assert plan.results == "results" and plan.consolidate_base_stage == "s"
    # an explicit value is kept; the same key left out takes the schema's default
    minimal["sft"]["seed"] = 7
    assert Plan(check_config(minimal)).stage("s")["seed"] == 7


def test_seeds_repeat_experts_and_run_name_moves_results():
    config = default_config()
    config.update(seeds=[0, 3], run_name="ablation")
    plan = Plan(check_config(config))
    assert plan.results == "results/ablation"
    assert plan.expert_replicas == ["easy_dense", "full_dense", "easy_dense.seed3", "full_dense.seed3"]
    ids = [m.id for m in plan.models()]
    assert "rl/full_dense.seed3" in ids and "merge/linear" in ids
    # the replicate's training and sampling seeds move by the seed offset
    assert plan.expert("full_dense.seed3")["seed"] == plan.expert("full_dense")["seed"] + 3 == 2 + 3
    assert plan.eval_seed("rl", "easy_dense.seed3") == plan.eval_seed("rl", "easy_dense") + 3
    # merges and distillation use the configured experts only
    assert plan.merge_experts("linear") == ["easy_dense", "full_dense"]
    assert replica_group("rl/easy_dense.seed3") == "rl/easy_dense"


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
    with pytest.raises(ConfigError, match="slerp merges exactly 2"):
        Plan(broken)
    broken = copy.deepcopy(config)
    broken["merge"]["strategies"][0]["method"] = "tie"
    with pytest.raises(ConfigError, match=r"strategies\[0\].method: 'tie' .*did you mean 'ties'"):
        Plan(broken)
    broken = copy.deepcopy(config)
    broken["merge"]["strategies"][4]["params"] = {"t": 0.5, "density": 0.5}  # slerp
    with pytest.raises(ConfigError, match=r"strategies\[4\].params: slerp reads no \['density'\]"):
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


def test_a_misspelled_key_names_the_nearest_valid_one():
    config = default_config()
    config["sft"]["bacth_size"] = config["sft"].pop("batch_size")
    with pytest.raises(ConfigError, match=r"invalid config at sft: .*'bacth_size' -> 'batch_size'"):
        check_config(config)
    config = default_config()
    config["evl"] = config.pop("eval")
    with pytest.raises(ConfigError, match=r"'evl' -> 'eval'"):
        check_config(config)
    config = default_config()
    config["sft"]["zzz"] = 1  # nothing near: no guess
    with pytest.raises(ConfigError) as error:
        check_config(config)
    assert "did you mean" not in str(error.value)


def test_nested_command_line_values_are_read_as_yaml():
    """snakemake --config eval='{k: 4, pass_at: [1, 4]}' hands nested values over as
    strings ({'k': '4', 'pass_at': ['1', '4']}): they are read as the same text in a
    config file would be; a string the schema wants stays a string."""
    config = default_config()
    config["eval"].update(k="4", pass_at=["1", "4"], temperature="0.5")
    config["train_processes"] = "2"
    config["run_name"] = "123"
    config["sft"]["liger_kernel"] = "true"
    check_config(config)
    assert config["eval"]["k"] == 4 and config["eval"]["pass_at"] == [1, 4]
    assert config["eval"]["temperature"] == 0.5 and config["train_processes"] == 2
    assert config["run_name"] == "123" and config["sft"]["liger_kernel"] is True
    config["eval"]["k"] = "four"  # not a number in any reading: refused, named
    with pytest.raises(ConfigError, match=r"eval.k: 'four'"):
        check_config(config)


@pytest.mark.slow
def test_a_nested_override_on_the_command_line_works(tmp_path):
    config = default_config()
    config["tasks"]["root"] = str(REPO / config["tasks"]["root"])
    path = write_config(tmp_path / "config.yaml", config)
    proc = run_snakemake(["-n", "--nolock", "--directory", str(tmp_path), "--configfile", str(path),
                          "--config", "eval={k: 4, pass_at: [1, 4]}"])
    assert "generate" in proc.stdout


def test_model_base_must_be_a_readable_model_folder(tmp_path):
    config = default_config()
    config["model"]["base"] = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"model.base: .*missing.*not found"):
        checked_plan(config)
    config["model"]["base"] = str(tmp_path)
    with pytest.raises(ConfigError, match=r"model.base: .*no config.json"):
        checked_plan(config)
    (tmp_path / "config.json").write_text("{}")
    assert checked_plan(config).model_dir("base", "base") == str(tmp_path)
