"""The training core shared by SFT and GRPO (chorus.training) and the SFT job entry point,
without training anything."""

import pytest
import torch

from chorus import sft
from chorus.settings import GRPOExpert, SFTStage
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


def test_train_stage_job_hands_the_workflow_settings_to_train_stage(monkeypatch):
    """scripts/sft.py passes the rule's params as they are; the job makes them one SFTStage
    (like rl.train_expert_job a GRPOExpert)."""
    calls = []
    monkeypatch.setattr(sft, "train_stage", lambda *args, **kwargs: calls.append((args, kwargs)) or {"steps": 1})
    stage = {"name": "easy", "mix": {"reference": ["easy"]}, "epochs": 2, "lr": 3e-4, "seed": 5, "save_steps": 7}
    settings = {"batch_size": 4, "grad_accum": 2, "max_length": 512, "attn": "sdpa", "liger": False,
                "compile_min_flops": None}
    assert sft.train_stage_job("base", "data.jsonl", "out", stage, settings, device="cpu",
                               deepspeed_config="zero2.json") == {"steps": 1}
    (args, kwargs), = calls
    # one SFTStage under the schema's names (the params spell attention and liger_kernel as runs recorded them)
    assert args == ("base", "data.jsonl", "out", SFTStage(
        name="easy", epochs=2, lr=3e-4, seed=5, save_steps=7, batch_size=4, grad_accum=2, max_length=512,
        attention="sdpa", liger_kernel=False, compile_min_flops=None))
    assert kwargs == {"device": "cpu", "deepspeed_config": "zero2.json"}
    with pytest.raises(KeyError):  # a missing setting fails, no default fills in for it
        sft.train_stage_job("base", "data.jsonl", "out", {k: v for k, v in stage.items() if k != "lr"}, settings)


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
