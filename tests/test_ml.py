"""Training, merging and sampling on a tiny model the project builds itself from the
shipped tasks (no hub access: HF_HUB_OFFLINE=1)."""

import importlib.util
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from conftest import TINY_MODEL  # noqa: E402
from transformers import AutoModelForCausalLM, TrainerCallback  # noqa: E402

from chorus.config import load_schema  # noqa: E402
from chorus.data import build_stage, build_stage_dataset, verified_rows  # noqa: E402
from chorus.generate import sample_completions  # noqa: E402
from chorus.io import read_jsonl, write_jsonl  # noqa: E402
from chorus.merge import METHODS, mergekit_config, run_merge  # noqa: E402
from chorus.metrics import pass_at_k, per_task_metrics  # noqa: E402
from chorus.modeling import (  # noqa: E402
    SHAPES,
    build_model_from_shape,
    build_tiny_model,
    load_model_and_tokenizer,
    model_config,
    load_tokenizer,
    task_corpus,
    tiny_model_defaults,
    train_tokenizer,
)
from chorus.prompts import build_prompt, extract_stimulus, render_prompt  # noqa: E402
from chorus.report import summary_table  # noqa: E402
from chorus.reward import CoverageReward, format_reward  # noqa: E402
from chorus.rl import train_expert  # noqa: E402
from chorus.settings import GRPOExpert, Sampling, SFTStage  # noqa: E402
from chorus.sft import train_stage  # noqa: E402
from chorus.tasks import DEFAULT_TASK_ROOT, load_tasks  # noqa: E402
from chorus.training import kernel_settings, work_dir_for  # noqa: E402

TRAIN = load_tasks(DEFAULT_TASK_ROOT, splits="train")


def weights(path):
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@pytest.fixture(scope="session")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("ml") / "base"
    build_tiny_model(out, task_corpus(TRAIN), **TINY_MODEL)
    return out


@pytest.fixture(scope="session")
def stages(base, tmp_path_factory):
    """Two SFT stages: format, then easy references, the second from the first."""
    root = tmp_path_factory.mktemp("stages")
    outputs = []
    model = base
    for stage in (
        {"name": "format", "mix": {"format": True}, "epochs": 1, "lr": 3e-3},
        {"name": "easy", "mix": {"reference": ["easy"]}, "epochs": 2, "lr": 3e-3},
    ):
        data = root / f"{stage['name']}.jsonl"
        build_stage(TRAIN, stage, data)
        out = root / stage["name"]
        metrics = train_stage(model, data, out, SFTStage(epochs=stage["epochs"], lr=stage["lr"], batch_size=4),
                              use_cpu=True)
        outputs.append((out, metrics))
        model = out
    return outputs


# --- model and tokenizer ---------------------------------------------------------------


def test_tokenizer_and_model_roundtrip(base):
    model, tokenizer = load_model_and_tokenizer(base, "cpu")
    text = 'await RisingEdge(dut.clk)\n    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())'
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    prompt = render_prompt(tokenizer, [{"role": "user", "content": "hi"}])
    assert prompt.endswith("<|assistant|>\n")
    assert tokenizer.pad_token and tokenizer.eos_token and tokenizer.pad_token_id != tokenizer.eos_token_id
    assert model.config.vocab_size == len(tokenizer) <= 512
    assert (base / "model.safetensors").exists() and model.dtype == torch.float32
    # deterministic: the same corpus and seed give the same tokenizer and weights
    again = train_tokenizer(task_corpus(TRAIN), 512)
    assert again.get_vocab() == tokenizer.get_vocab()


def test_tiny_model_shape_defaults_to_the_config_schema(tmp_path):
    """The embedded model's shape has one definition: config `model.tiny` in the schema."""
    schema = load_schema()["properties"]["model"]["properties"]["tiny"]["properties"]
    defaults = tiny_model_defaults()
    assert defaults == {key: spec["default"] for key, spec in schema.items()}
    out = build_tiny_model(tmp_path / "tiny", task_corpus(TRAIN[:2]), vocab_size=400)
    config = json.loads((out / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"],
            config["max_position_embeddings"]) == (defaults["hidden_size"], defaults["num_layers"],
                                                   defaults["num_heads"], defaults["max_position_embeddings"])


def test_named_shapes_grow_in_size(base):
    """The benchmarks' named shapes (modeling.SHAPES) are Llama configs, smallest first."""
    tokenizer = load_tokenizer(base)
    sizes = []
    for name in ("0.5b", "1.5b", "3b"):
        config = model_config(tokenizer, SHAPES[name])
        assert type(config).__name__ == "LlamaConfig" and config.tie_word_embeddings
        with torch.device("meta"):
            sizes.append(sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters()))
    assert sizes == sorted(sizes) and 0.3e9 < sizes[0] < 0.6e9


def test_other_architectures_and_shapes(base, tmp_path):
    qwen = build_tiny_model(tmp_path / "qwen2", task_corpus(TRAIN[:3]), architecture="qwen2", **TINY_MODEL)
    model, tokenizer = load_model_and_tokenizer(qwen, "cpu")
    assert type(model).__name__ == "Qwen2ForCausalLM"
    # our tokenizer, not the Qwen2Tokenizer AutoTokenizer would swap in for qwen2
    assert len(tokenizer) == model.config.vocab_size
    shaped = build_model_from_shape(
        tmp_path / "shaped",
        {"architecture": "qwen3", "hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 96},
        base,
    )
    model, _ = load_model_and_tokenizer(shaped, "cpu")
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.num_key_value_heads == 2
    assert next(model.parameters()).dtype == torch.float32  # cpu default; saved as bfloat16
    assert json.loads((shaped / "config.json").read_text())["dtype"] == "bfloat16"


# --- prompts and data ------------------------------------------------------------------


def test_prompt_contents_and_rendering(base):
    task = TRAIN[0]
    system, user = build_prompt(task)
    assert system["role"] == "system" and "cocotb" in system["content"]
    assert task.spec.strip() in user["content"] and task.toplevel in user["content"]
    assert all(text.strip() in user["content"] for text in task.rtl_text().values())
    assert "```python" in user["content"]
    assert all(f"{metric} >=" in user["content"] for metric in task.coverage_target)

    class Plain:  # a tokenizer without a chat template
        chat_template = None

    text = render_prompt(Plain(), [system, user])
    assert text.startswith("system:\n") and text.endswith("assistant:\n")


def test_extract_stimulus():
    assert extract_stimulus("intro\n```python\nimport cocotb\n```\nbye") == "import cocotb\n"
    assert extract_stimulus("```py\nx = 1") == "x = 1\n"  # cut off by max_new_tokens
    assert extract_stimulus("```systemverilog\nmodule m;\n```\n```python\nx = 2\n```") == "x = 2\n"
    assert extract_stimulus("```\ny = 3\n```") == "y = 3\n"
    assert extract_stimulus("```python\nx = 1```") == "x = 1\n"
    assert extract_stimulus("no fence at all") == "no fence at all"


def test_stage_data_mixes(tmp_path):
    rows = build_stage_dataset(TRAIN, {"reference": ["easy", "hard"]}, tmp_path / "ref.jsonl")
    assert {r["source"] for r in rows} == {"reference"}
    assert len(rows) == sum(t.difficulty in ("easy", "hard") for t in TRAIN)
    assert rows[0]["completion"][0]["content"].startswith("```python\nimport cocotb")
    assert [m["role"] for m in rows[0]["prompt"]] == ["system", "user"]
    assert read_jsonl(tmp_path / "ref.jsonl") == json.loads(json.dumps(rows))
    fmt = build_stage_dataset(TRAIN, {"format": True}, tmp_path / "fmt.jsonl")
    assert len(fmt) == len(TRAIN) and {r["source"] for r in fmt} == {"format"}
    with pytest.raises(ValueError, match="selects no examples"):
        build_stage_dataset(TRAIN, {"reference": []}, tmp_path / "none.jsonl")
    with pytest.raises(ValueError, match="unknown SFT mix"):
        build_stage_dataset(TRAIN, {"references": ["easy"]}, tmp_path / "bad.jsonl")
    # verified samples: passing ones only, deduplicated, unknown tasks ignored
    task = TRAIN[0]
    samples = tmp_path / "samples.jsonl"
    code = "```python\nimport cocotb\n```"
    write_jsonl(samples, [
        {"task_id": task.id, "completion": code, "passed": True},
        {"task_id": task.id, "completion": code, "passed": True},
        {"task_id": task.id, "completion": "```python\nfail\n```", "passed": False},
        {"task_id": "not_a_task", "completion": code, "passed": True},
    ])
    assert [r["task_id"] for r in verified_rows(TRAIN, samples)] == [task.id]
    mixed = build_stage_dataset(TRAIN, {"format": True, "verified": str(samples)}, tmp_path / "mixed.jsonl")
    assert [r["source"] for r in mixed].count("verified") == 1


# --- SFT -------------------------------------------------------------------------------


@pytest.mark.slow
def test_sft_loss_decreases_on_a_fixed_batch(base, tmp_path):
    data = tmp_path / "two.jsonl"
    rows = build_stage_dataset(TRAIN[:2], {"reference": ["easy", "medium", "hard"]}, data)
    assert len(rows) == 2
    metrics = train_stage(base, data, tmp_path / "fixed",
                          SFTStage(max_steps=5, lr=1e-2, batch_size=2, lr_scheduler_type="constant"), use_cpu=True)
    losses = metrics["losses"]
    assert len(losses) == 5 and losses[-1] < losses[0] * 0.9, losses
    assert metrics["tokens"] > 0 and metrics["tokens_per_s"] > 0
    assert metrics["steady_tokens_per_s"] > 0  # 5 steps: 2 after the warm-up
    saved = json.loads((tmp_path / "fixed" / "train_metrics.json").read_text())
    assert saved["steps"] == 5 and saved["tokens_per_s"] == pytest.approx(metrics["tokens_per_s"])
    # the same losses as offline TensorBoard event files beside the model
    events = list((tmp_path / "fixed" / "runs").rglob("events.out.tfevents.*"))
    assert events and b"train/loss" in b"".join(e.read_bytes() for e in events)


def test_auto_kernels_follow_the_device():
    """`auto`: sdpa on padded rows on CPU (flex has no CPU backward); flex_attention on
    padding-free rows and Liger (when installed) on a GPU."""
    assert kernel_settings("auto", "auto", on_gpu=False) == {
        "attn_implementation": "sdpa", "padding_free": False, "use_liger_kernel": False}
    gpu = kernel_settings("auto", "auto", on_gpu=True)
    assert gpu["attn_implementation"] == "flex_attention" and gpu["padding_free"]
    assert gpu["use_liger_kernel"] == (importlib.util.find_spec("liger_kernel") is not None)
    assert kernel_settings("sdpa", True, on_gpu=True)["use_liger_kernel"] is True  # explicit wins


def test_staged_sft_trains_and_chains(base, stages):
    (first, m1), (second, m2) = stages
    assert m1["steps"] > 0 and m2["last_loss"] < m2["first_loss"]
    w0, w1, w2 = weights(base), weights(first), weights(second)
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(w0[key], w1[key]) and not torch.equal(w1[key], w2[key])
    saved = json.loads((second / "train_metrics.json").read_text())
    assert saved["steps"] == m2["steps"] and saved["model_in"] == str(first)  # chained
    assert (second / "tokenizer.json").exists() and load_tokenizer(second).chat_template
    assert not work_dir_for(second).exists() and not work_dir_for(first).exists()


class Crash(TrainerCallback):
    """Kills training right after the checkpoint of step 2 is written."""

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == 2:
            raise KeyboardInterrupt("killed")


@pytest.mark.slow
def test_sft_resumes_from_last_checkpoint(base, tmp_path):
    data = tmp_path / "two.jsonl"
    build_stage_dataset(TRAIN[:2], {"format": True}, data)
    out = tmp_path / "resumed"
    stage = SFTStage(max_steps=3, lr=1e-3, batch_size=2, save_steps=1)
    with pytest.raises(KeyboardInterrupt):
        train_stage(base, data, out, stage, callbacks=[Crash()], use_cpu=True)
    assert not out.exists() and (work_dir_for(out) / "checkpoint-2").is_dir()
    metrics = train_stage(base, data, out, stage, use_cpu=True)
    assert metrics["resumed_from"].endswith("checkpoint-2") and metrics["steps"] == 3
    assert out.is_dir() and not work_dir_for(out).exists()


# --- RL --------------------------------------------------------------------------------


def test_grpo_expert_with_simulation_reward(stages, tmp_path):
    sft = stages[-1][0]
    tasks = [t for t in TRAIN if t.difficulty == "easy"][:2]
    metrics = train_expert(
        sft, tasks, tmp_path / "expert", GRPOExpert(steps=2, num_generations=2, batch_size=2, max_completion_length=16),
        sim_workers=2, use_cpu=True,
    )
    assert metrics["steps"] == 2
    calls = metrics["reward_calls"]
    assert len(calls) == 2 and all(c["n"] == 2 for c in calls)
    assert all(sum(c["statuses"].values()) == 2 for c in calls)  # every completion simulated
    per_step = metrics["rewards_per_step"]
    assert len(per_step) == 2
    assert {"rewards/coverage_dense/mean", "rewards/format_reward/mean", "sim/wall_s"} <= per_step[0].keys()
    saved = json.loads((tmp_path / "expert" / "rl_metrics.json").read_text())
    assert 0 < saved["reward_wall_s"] <= saved["runtime_s"]
    model, tokenizer = load_model_and_tokenizer(tmp_path / "expert", "cpu")
    assert model.config.vocab_size == len(tokenizer)
    assert not work_dir_for(tmp_path / "expert").exists()


@pytest.mark.slow  # simulates
def test_coverage_reward_dense_and_binary():
    task = next(t for t in TRAIN if t.id == "up_counter")
    ref = "```python\n" + task.reference_stimulus.read_text() + "```"
    weak = "```python\n" + task.trivial_stimulus.read_text() + "```"
    reward = CoverageReward({task.id: task}, "dense", workers=2)
    assert reward.__name__ == "coverage_dense"
    # full coverage, then an error: a broken answer earns nothing, below the weak one
    broken = ref[:-3] + "\n\n@cocotb.test()\nasync def then_fails(dut):\n    raise RuntimeError('broken')\n```"
    dense = reward([ref, weak, "nonsense", broken], task_id=[task.id] * 4)
    assert dense[0] == 1.0 and 0 < dense[1] < 1 and dense[2] == 0.0 and dense[3] == 0.0
    assert reward.calls[-1]["statuses"]["runtime_error"] == 2  # "nonsense" (no test) and the broken one
    binary = CoverageReward([task], "binary", workers=2)([ref, weak], task_id=[task.id] * 2)
    assert binary == [1.0, 0.0]
    conversational = [[{"role": "assistant", "content": ref}]]
    assert CoverageReward([task], "binary", workers=1)(conversational, task_id=[task.id]) == [1.0]
    assert format_reward([ref, "```python\ndef (:\n```", "plain"]) == [1.0, 0.0, 0.0]


@pytest.mark.slow
def test_coverage_reward_compiles_designs_before_the_first_call(tmp_path, monkeypatch):
    """The designs build in the background from the moment the reward exists (while the
    trainer loads and generates), not inside the first reward call."""
    from chorus.harness.build import build_key

    monkeypatch.setenv("CHORUS_CACHE_DIR", str(tmp_path))
    tasks = [t for t in TRAIN if t.difficulty == "easy"][:2]
    reward = CoverageReward(tasks, "dense", workers=1)
    assert len(reward.prebuilds) == 2 and not reward.calls
    for future in reward.prebuilds:
        future.result(timeout=300)
    assert all((tmp_path / build_key(t) / "BUILD_OK").is_file() for t in tasks)


@pytest.mark.slow
def test_closing_the_reward_drops_the_queued_builds(tmp_path, monkeypatch):
    """After training, queued prebuilds must not keep the process alive: close() cancels
    every build not started (two run at a time), so a job ends when its training ends."""
    monkeypatch.setenv("CHORUS_CACHE_DIR", str(tmp_path))
    reward = CoverageReward(TRAIN[:6], "dense", workers=1)
    reward.close()
    cancelled = [f for f in reward.prebuilds if f.cancelled()]
    assert len(cancelled) >= len(reward.prebuilds) - 2, "only the two running builds may go on"
    for future in reward.prebuilds:
        if not future.cancelled():
            future.result(timeout=300)


# --- merging ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def two_models(stages):
    return str(stages[0][0]), str(stages[1][0])


def merged(config, tmp_path, name):
    return weights(run_merge(config, tmp_path / name))


def test_linear_merge_is_the_average(two_models, tmp_path):
    a, b = two_models
    out = merged(mergekit_config("linear", [a, b], None), tmp_path, "linear")
    wa, wb = weights(a), weights(b)
    assert out.keys() == wa.keys()
    for key in out:
        torch.testing.assert_close(out[key], (wa[key] + wb[key]) / 2)
    assert yaml.safe_load((tmp_path / "linear" / "mergekit_config.yml").read_text())["merge_method"] == "linear"
    assert load_tokenizer(tmp_path / "linear").get_vocab() == load_tokenizer(a).get_vocab()


def test_slerp_endpoint_and_task_arithmetic_identity(two_models, tmp_path):
    a, b = two_models
    slerp0 = merged(mergekit_config("slerp", [a, b], None, {"t": 0.0}), tmp_path, "slerp")
    wa = weights(a)
    for key in slerp0:
        torch.testing.assert_close(slerp0[key], wa[key])
    # base + 1.0 * (expert - base) is the expert
    ta = merged(mergekit_config("task_arithmetic", [b], str(a), {"weight": 1.0}), tmp_path, "ta")
    wb = weights(b)
    for key in ta:
        torch.testing.assert_close(ta[key], wb[key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["ties", "dare_ties"])
def test_sparse_merges_are_finite_and_new(base, two_models, tmp_path, method):
    a, b = two_models
    config = mergekit_config(method, [a, b], str(base), {"weight": 0.5, "density": 0.5})
    assert config["base_model"] == str(base) and config["models"][0]["parameters"]["density"] == 0.5
    out = merged(config, tmp_path, method)
    wa, wb = weights(a), weights(b)
    key = "model.layers.0.mlp.up_proj.weight"
    assert all(torch.isfinite(v).all() for v in out.values())
    assert not torch.equal(out[key], wa[key]) and not torch.equal(out[key], wb[key])


def test_mergekit_config_rules():
    with pytest.raises(ValueError, match="exactly 2"):
        mergekit_config("slerp", ["a", "b", "c"], None)
    with pytest.raises(ValueError, match="needs the base model"):
        mergekit_config("ties", ["a", "b"], None)
    with pytest.raises(ValueError, match="unknown merge method"):
        mergekit_config("average", ["a", "b"], None)
    config = mergekit_config("linear", ["a", "b"], None, {"weights": [0.25, 0.75]})
    assert [m["parameters"]["weight"] for m in config["models"]] == [0.25, 0.75]


@pytest.mark.parametrize("method", list(METHODS))
def test_every_merge_method_of_the_table_is_a_valid_mergekit_config(method):
    """METHODS is the one list of merge methods: each row, with its defaults, gives a
    configuration mergekit accepts, with a base model exactly where the row says."""
    from mergekit.config import MergeConfiguration

    spec = METHODS[method]
    models = ["expert_a", "expert_b"][: spec.models or 2]
    config = mergekit_config(method, models, "sft_base", {})
    MergeConfiguration.model_validate(config)
    assert config["merge_method"] == method
    assert config.get("base_model") == {"none": None, "task_vectors": "sft_base", "first": "expert_a"}[spec.base]


# --- metrics ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(5, 0, 1, 0.0), (5, 5, 1, 1.0), (5, 2, 1, 0.4), (10, 3, 5, 1 - 21 / 252), (4, 1, 4, 1.0), (3, 1, 2, 2 / 3)],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_rejects_bad_counts_and_aggregates():
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    frame = pd.DataFrame({
        "task_id": ["a"] * 5 + ["b"] * 5,
        "passed": [True, True, False, False, False] + [False] * 5,
        "score": [1, 1, 0.5, 0.5, 0] + [0.2] * 5,
    })
    table = per_task_metrics(frame, ks=(1, 5)).set_index("task_id")
    assert table.loc["a", "pass@1"] == pytest.approx(0.4) and table.loc["a", "pass@5"] == 1.0
    assert table.loc["b", "pass@1"] == 0.0 and table.loc["a", "mean_coverage"] == pytest.approx(0.6)
    # the mean over tasks is report.summary_table's (the workflow's aggregation)
    summary = summary_table(frame.assign(model="m"), [1]).set_index("model").loc["m"]
    assert summary["pass@1"] == pytest.approx(0.2) and summary["tasks"] == 2


# --- generation ------------------------------------------------------------------------


def test_generation_writes_k_rows_and_resumes(base, tmp_path):
    tasks = TRAIN[:2]
    out = tmp_path / "gen.jsonl"
    stats = sample_completions(base, tasks, 3, out, Sampling(max_new_tokens=8), device="cpu")
    rows = read_jsonl(out)
    assert [(r["task_id"], r["sample_id"]) for r in rows] == [(t.id, i) for t in tasks for i in range(3)]
    assert stats["generated"] == 6 and stats["new_tokens"] > 0
    # a killed run left two samples behind: the rerun keeps them and draws only the rest
    partial = tmp_path / "again.jsonl.partial"
    kept = [dict(rows[0], completion="KEPT-0"), dict(rows[1], completion="KEPT-1")]
    partial.write_text("".join(json.dumps(r) + "\n" for r in kept))
    stats = sample_completions(base, tasks, 3, tmp_path / "again.jsonl", Sampling(max_new_tokens=8))
    again = read_jsonl(tmp_path / "again.jsonl")
    assert [r["completion"] for r in again[:2]] == ["KEPT-0", "KEPT-1"]
    assert stats["samples"] == 6 and stats["resumed"] == 2 and stats["generated"] == 4 and len(again) == 6
    assert not partial.exists()
    # sampling is seeded: a fresh run draws exactly the same samples
    sample_completions(base, tasks, 3, tmp_path / "fresh.jsonl", Sampling(max_new_tokens=8))
    assert read_jsonl(tmp_path / "fresh.jsonl") == rows
