"""The training core shared by SFT and GRPO (chorus.training) and the settings objects the
workflow's jobs hand to their job functions, without training anything."""

import pytest
import torch

from chorus.settings import GRPOExpert, Sampling, SFTStage
from chorus.training import precision_flags, resolve_device, work_dir_for


@pytest.mark.parametrize("gpu", [True, False])
def test_one_device_resolver(monkeypatch, gpu):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    assert resolve_device("auto") == resolve_device(None) == ("cuda" if gpu else "cpu")
    assert resolve_device("cpu") == "cpu" and resolve_device("cuda") == "cuda"
    if not gpu:  # `auto` without a GPU trains in float32 on the CPU
        assert precision_flags("auto") == precision_flags(None) == {"bf16": False, "use_cpu": True}
    assert precision_flags("cpu") == {"bf16": False, "use_cpu": True}


def test_work_dir_sits_beside_the_output(tmp_path):
    assert work_dir_for(tmp_path / "models" / "sft" / "easy") == tmp_path / "models" / "sft" / "easy.tmp-train"


def test_sft_stage_of_a_job_is_the_workflow_settings_under_schema_names():
    """scripts/sft.py makes the rule's `stage` and `settings` params one SFTStage, which it
    hands to train_stage whole; a missing setting fails, no default fills in for it."""
    stage = {"name": "easy", "mix": {"reference": ["easy"]}, "epochs": 2, "lr": 3e-4, "seed": 5, "save_steps": 7}
    settings = {"batch_size": 4, "grad_accum": 2, "max_length": 512, "attn": "sdpa", "liger": False,
                "compile_min_flops": None}
    # the params spell attention and liger_kernel as runs recorded them
    assert SFTStage.from_job(stage, settings) == SFTStage(
        name="easy", epochs=2, lr=3e-4, seed=5, save_steps=7, batch_size=4, grad_accum=2, max_length=512,
        attention="sdpa", liger_kernel=False, compile_min_flops=None)
    with pytest.raises(KeyError, match="lr"):
        SFTStage.from_job({k: v for k, v in stage.items() if k != "lr"}, settings)


def test_expert_tasks_are_its_splits_and_difficulties(tmp_path):
    """The tasks scripts/rl.py gives an expert: the manifest's tasks of the expert's
    splits, narrowed to its difficulties when it names any."""
    from chorus.rl import expert_tasks
    from chorus.tasks import DEFAULT_TASK_ROOT, load_tasks, write_manifest

    tasks = load_tasks(DEFAULT_TASK_ROOT)
    manifest = tmp_path / "manifest.json"
    write_manifest(tasks, manifest, "shipped")
    train = [t.id for t in tasks if t.split == "train"]
    assert [t.id for t in expert_tasks(manifest, GRPOExpert(splits=("train",)))] == train
    easy = [t.id for t in tasks if t.split == "train" and t.difficulty == "easy"]
    assert 0 < len(easy) < len(train)
    assert [t.id for t in expert_tasks(manifest, GRPOExpert(splits=("train",), difficulties=("easy",)))] == easy


def test_grpo_expert_of_a_job_keeps_its_nulls_and_names():
    """The rl rule's params, completed by job_settings, are a GRPOExpert field for field; a
    null steps_per_generation stays null; a configured key that is missing fails."""
    from chorus.plan import Plan, job_settings
    from conftest import default_config

    config = default_config()
    params = {"expert": Plan(config).expert("easy_dense")}
    expert = GRPOExpert.from_job(job_settings(params, config)["expert"])
    assert expert.name == "easy_dense" and expert.steps_per_generation is None
    assert expert.save_steps == config["rl"]["save_steps"] and expert.num_generations == config["rl"]["num_generations"]
    with pytest.raises(KeyError, match="save_steps"):
        GRPOExpert.from_job(params["expert"])


def test_sampling_of_a_job_is_the_schema_eval_keys_it_names():
    """scripts/generate.py makes the rule's `sampling` params one Sampling: its fields are
    the schema's `eval` keys of the same names, with the schema's defaults; a null
    batch_size (left out of the params) comes back null; a missing key fails."""
    from chorus.config import load_schema
    from chorus.plan import Plan, job_settings
    from conftest import default_config

    schema_eval = load_schema()["properties"]["eval"]["properties"]
    assert Sampling() == Sampling(**{k: schema_eval[k]["default"] for k in Sampling.CONFIGURED})
    config = default_config()
    params = {"sampling": Plan(config).sampling()}
    assert "batch_size" not in params["sampling"]
    assert Sampling.from_job(job_settings(params, config)["sampling"]) == Sampling()
    config["eval"].update(batch_size=512, max_new_tokens=768, sampler="static")
    params = {"sampling": Plan(config).sampling()}
    assert Sampling.from_job(job_settings(params, config)["sampling"]) == Sampling(
        max_new_tokens=768, sampler="static", batch_size=512)
    with pytest.raises(KeyError, match="top_p"):
        Sampling.from_job({k: v for k, v in params["sampling"].items() if k != "top_p"})


@pytest.mark.parametrize("grad_accum", [None, 2])
def test_grpo_config_takes_the_expert_micro_batches(tmp_path, grad_accum):
    """rl.grad_accum reaches TRL as gradient_accumulation_steps (null: one) and
    rl.steps_per_generation counts micro-batches: 4 completions x 4 micro-batches is a
    rollout batch of 16 whatever the accumulation, trained on in 4 / grad_accum steps."""
    from chorus.rl import grpo_config

    expert = GRPOExpert(num_generations=2, batch_size=4, grad_accum=grad_accum, steps_per_generation=4)
    args = grpo_config(expert, "generate", tmp_path, precision_flags("cpu"), None, [], None, {"report_to": "none"})
    assert args.gradient_accumulation_steps == (grad_accum or 1)
    assert (args.per_device_train_batch_size, args.generation_batch_size) == (4, 16)


def test_the_time_budget_ends_training_with_a_rollout_batch():
    """rl.time_budget_s: the callback stops at the end of the first rollout batch after
    which one more, at the pace so far, would pass the budget; never inside a batch."""
    from transformers import TrainerControl, TrainerState

    from chorus.rl import time_budget_callback

    now = [0.0]
    budget = time_budget_callback(10.0, steps_per_batch=2, clock=lambda: now[0])
    state, control = TrainerState(), TrainerControl()
    budget.on_train_begin(None, state, control)
    for step, seconds in ((1, 3.0), (2, 4.0), (3, 7.0), (4, 8.0)):
        state.global_step, now[0] = step, seconds
        budget.on_step_end(None, state, control)
        # step 3 ends no batch; after two batches in 8 s a third (4 s more) would end at
        # 12 s > 10: stop there
        assert control.should_training_stop is (step == 4) and budget.stopped is (step == 4)
