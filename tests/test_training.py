"""The training core shared by SFT and GRPO (chorus.training) and the SFT job entry point,
without training anything."""

import pytest
import torch

from chorus import sft
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
    """scripts/sft.py passes the rule's params as they are (like rl.train_expert_job)."""
    calls = []
    monkeypatch.setattr(sft, "train_stage", lambda *args, **kwargs: calls.append((args, kwargs)) or {"steps": 1})
    stage = {"name": "easy", "mix": {"reference": ["easy"]}, "epochs": 2, "lr": 3e-4, "seed": 5, "save_steps": 7}
    settings = {"batch_size": 4, "grad_accum": 2, "max_length": 512, "attn": "sdpa", "liger": False,
                "compile_min_flops": None}
    assert sft.train_stage_job("base", "data.jsonl", "out", stage, settings, device="cpu",
                               deepspeed_config="zero2.json") == {"steps": 1}
    (args, kwargs), = calls
    assert args == ("base", "data.jsonl", "out")
    assert kwargs == {"epochs": 2, "lr": 3e-4, "seed": 5, "save_steps": 7, **settings, "device": "cpu",
                      "deepspeed_config": "zero2.json"}
    with pytest.raises(KeyError):  # a missing setting fails, no default fills in for it
        sft.train_stage_job("base", "data.jsonl", "out", {k: v for k, v in stage.items() if k != "lr"}, settings)
