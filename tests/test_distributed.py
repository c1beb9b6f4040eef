"""Training jobs start one rank per GPU (chorus.launch). CI has no GPU: the same launcher
runs two ranks on CPU over gloo, through the function and through the workflow's rules."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from chorus.data import build_stage_dataset
from chorus.launch import _rank_env, inside_launcher, launch, process_count, resolve, use_compile_cache
from chorus.modeling import build_tiny_model, task_corpus
from chorus.settings import SFTStage
from chorus.tasks import DEFAULT_TASK_ROOT, load_tasks
from conftest import REPO, TINY_MODEL, e2e_config, run_snakemake

TRAIN = load_tasks(DEFAULT_TASK_ROOT, splits="train")


def test_process_count():
    assert process_count("cpu") == 1
    assert process_count("cpu", 3) == 3
    assert process_count("cuda", "2") == 2
    with pytest.raises(ValueError):
        process_count("cpu", 0)


def test_auto_follows_the_visible_gpus():
    """`auto` on cuda counts the GPUs the job may see (SLURM sets CUDA_VISIBLE_DEVICES to
    the allotted ones); none visible still gives one rank."""
    code = "from chorus.launch import process_count; import torch; print(process_count('cuda'), torch.cuda.device_count())"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "0"]


def test_resolve_rejects_malformed_targets():
    assert resolve("chorus.sft:train_stage").__name__ == "train_stage"
    with pytest.raises(ValueError):
        resolve("chorus.sft.train_stage")


def test_compile_cache_reaches_the_ranks(tmp_path, monkeypatch):
    """config `compile_cache` becomes the ranks' TORCHINDUCTOR_CACHE_DIR (absolute: the
    ranks may start elsewhere); a site's own setting wins; null leaves PyTorch's default."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "")  # records the original, restored after the test
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    use_compile_cache(None)
    assert "TORCHINDUCTOR_CACHE_DIR" not in _rank_env()
    monkeypatch.chdir(tmp_path)
    use_compile_cache(".cache/torch_compile")
    assert _rank_env()["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / ".cache" / "torch_compile")
    use_compile_cache("/elsewhere")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / ".cache" / "torch_compile")


@pytest.fixture(scope="module")
def sft_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("launch")
    base = build_tiny_model(root / "base", task_corpus(TRAIN), **TINY_MODEL)
    data = root / "data.jsonl"
    build_stage_dataset(TRAIN[:4], {"format": True}, data)
    # one SFTStage, as scripts/sft.py gives it: the launcher carries it to the ranks whole
    return dict(model_in=str(base), dataset_jsonl=str(data),
                stage=SFTStage(epochs=1, lr=1e-3, batch_size=1, max_length=4096), use_cpu=True)


def test_two_ranks_shard_the_data(sft_job, tmp_path):
    """Four examples, batch 1 per rank, one epoch: one process takes 4 optimizer steps,
    two data-parallel ranks take 2, and the saved model loads."""
    assert not inside_launcher()
    job = sft_job
    single = launch("chorus.sft:train_stage", {**job, "out_dir": str(tmp_path / "one")}, processes=1)
    assert single["world_size"] == 1 and single["steps"] == 4
    assert launch("chorus.sft:train_stage", {**job, "out_dir": str(tmp_path / "two")}, processes=2) is None
    metrics = json.loads((tmp_path / "two" / "train_metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["steps"] == 2
    assert (tmp_path / "two" / "model.safetensors").is_file()
    assert not (tmp_path / "two.tmp-train").exists()


@pytest.mark.parametrize("zero", ["zero2", "zero3"])
def test_deepspeed_zero_over_two_ranks(sft_job, tmp_path, zero):
    """The shipped ZeRO configs through the launcher (DeepSpeed's CPU accelerator here):
    the ranks train, and ZeRO-3's sharded weights are gathered into a whole model that
    differs from the base."""
    from transformers import AutoModelForCausalLM

    config = str(REPO / "config" / "deepspeed" / f"{zero}.json")
    launch("chorus.sft:train_stage", {**sft_job, "out_dir": str(tmp_path / zero), "deepspeed_config": config},
           processes=2, always_launcher=True)
    metrics = json.loads((tmp_path / zero / "train_metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["deepspeed"] == config and metrics["steps"] == 2
    trained = AutoModelForCausalLM.from_pretrained(tmp_path / zero).state_dict()
    base = AutoModelForCausalLM.from_pretrained(sft_job["model_in"]).state_dict()
    assert trained.keys() == base.keys()
    assert all(trained[k].shape == base[k].shape for k in base)
    assert any((trained[k] - base[k]).abs().max() > 0 for k in base)


@pytest.mark.slow
def test_a_failing_rank_fails_the_job(tmp_path):
    with pytest.raises(subprocess.CalledProcessError):
        launch("chorus.sft:train_stage", {"model_in": str(tmp_path / "missing"), "dataset_jsonl": "x",
                                          "out_dir": str(tmp_path / "out"), "stage": {}}, processes=2)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_rules_launch_sft_and_rl_with_two_ranks(tmp_path):
    """train_processes: 2 and a ZeRO-2 config -> the sft and rl rules start two DeepSpeed
    ranks each (what `auto` does on a 2-GPU SLURM allocation): metrics record the world
    size, GRPO still simulates every rollout, and the expert lands complete."""
    config_path = e2e_config(tmp_path)
    config = yaml.safe_load(config_path.read_text())
    config["train_processes"] = 2
    config["synth"]["enabled"] = False  # the corpus has its own tests (test_synth.py)
    config["deepspeed"] = str(REPO / "config" / "deepspeed" / "zero2.json")
    # the expert starts from the first SFT stage: one two-rank SFT job is enough to check
    next(e for e in config["rl"]["experts"] if e["name"] == "easy_dense")["from_stage"] = "format"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    run_snakemake(["results/models/rl/easy_dense", "--cores", "2", "--directory", str(tmp_path),
                   "--configfile", str(config_path)], timeout=900)
    models = tmp_path / "results" / "models"
    sft = json.loads((models / "sft" / "format" / "train_metrics.json").read_text())
    assert sft["world_size"] == 2 and sft["deepspeed"] == config["deepspeed"]
    assert not (models / "sft" / "easy").exists()
    rl = json.loads((models / "rl" / "easy_dense" / "rl_metrics.json").read_text())
    assert rl["world_size"] == 2 and rl["steps"] == config["rl"]["steps"] and rl["deepspeed"]
    assert all(sum(call["statuses"].values()) == call["n"] > 0 for call in rl["reward_calls"])
    log = (tmp_path / "results" / "logs" / "rl" / "easy_dense.log").read_text()
    assert "launching 2 ranks" in log


@pytest.mark.slow  # two processes
def test_rank_zero_decides_for_every_rank(tmp_path):
    """chorus.training.rank_zero_decides: each of two gloo ranks proposes its own answer
    and both get rank 0's (a time budget that stopped one rank alone would hang the other
    in its next collective); outside a distributed run a value stays as it is."""
    from chorus.training import rank_zero_decides

    assert rank_zero_decides(True) is True and rank_zero_decides(False) is False
    script = tmp_path / "decide.py"
    script.write_text(
        "import os, sys\n"
        "import torch.distributed as dist\n"
        "from chorus.training import rank_zero_decides\n"
        "dist.init_process_group('gloo')\n"
        "rank = dist.get_rank()\n"
        "answer = rank_zero_decides(rank == 0)\n"
        f"open(os.path.join({str(tmp_path)!r}, f'rank{{rank}}'), 'w').write(str(answer))\n"
        "dist.destroy_process_group()\n"
    )
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script)],
                   check=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")}, timeout=120)
    assert [(tmp_path / f"rank{r}").read_text() for r in (0, 1)] == ["True", "True"]
