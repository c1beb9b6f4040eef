"""Training, merging and sampling on a tiny model the project builds itself."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from chorus.data import build_stage_dataset
from chorus.generate import sample_completions
from chorus.io import read_jsonl
from chorus.merge import run_merge, write_mergekit_config
from chorus.metrics import pass_at_k
from chorus.modeling import build_tiny_model, task_corpus
from chorus.rl import CoverageReward, format_reward, train_expert
from chorus.sft import train_stage
from chorus.tasks import DEFAULT_TASK_ROOT, load_tasks

TRAIN = load_tasks(DEFAULT_TASK_ROOT, splits="train")


def weights(path):
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("ml") / "base"
    build_tiny_model(out, task_corpus(TRAIN), hidden_size=32, num_layers=1, num_heads=2, vocab_size=512)
    return out


@pytest.fixture(scope="module")
def stages(base, tmp_path_factory):
    """Two SFT stages: format, then easy references, the second from the first."""
    root = tmp_path_factory.mktemp("stages")
    outputs = []
    model = base
    for name, mix in (("format", {"format": True}), ("easy", {"reference": ["easy"]})):
        data = root / f"{name}.jsonl"
        build_stage_dataset(TRAIN, mix, data)
        out = root / name
        metrics = train_stage(model, data, out, epochs=2, lr=3e-3, batch_size=4, max_length=4096)
        outputs.append((out, metrics))
        model = out
    return outputs


def test_tokenizer_and_model_roundtrip(base):
    tokenizer = AutoTokenizer.from_pretrained(base)
    text = "await RisingEdge(dut.clk)"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|assistant|>\n")
    model = AutoModelForCausalLM.from_pretrained(base)
    assert model.config.vocab_size == len(tokenizer) <= 512


def test_stage_data_mixes():
    rows = build_stage_dataset(TRAIN, {"reference": ["easy", "hard"]}, "/dev/null")
    assert {r["source"] for r in rows} == {"reference"}
    assert len(rows) == sum(t.difficulty in ("easy", "hard") for t in TRAIN)
    assert rows[0]["completion"][0]["content"].startswith("```python\nimport cocotb")
    with pytest.raises(ValueError, match="selects no examples"):
        build_stage_dataset(TRAIN, {"reference": []}, "/dev/null")


def test_staged_sft_trains_and_chains(base, stages):
    (first, m1), (second, m2) = stages
    assert m1["last_loss"] < m1["first_loss"] and m2["last_loss"] < m2["first_loss"]
    w0, w1, w2 = weights(base), weights(first), weights(second)
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(w0[key], w1[key]) and not torch.equal(w1[key], w2[key])
    assert json.loads((second / "train_metrics.json").read_text())["steps"] == m2["steps"]
    assert not any(p.name.endswith(".work") for p in second.parent.iterdir())


def test_grpo_expert_with_simulation_reward(stages, tmp_path):
    sft = stages[-1][0]
    tasks = [t for t in TRAIN if t.difficulty == "easy"][:2]
    metrics = train_expert(
        sft, tasks, tmp_path / "expert", steps=2, num_generations=2, batch_size=2,
        max_completion_length=24, sim_workers=2,
    )
    assert metrics["steps"] == 2
    calls = metrics["reward_calls"]
    assert len(calls) == 2 and all(c["n"] == 2 for c in calls)
    # every completion went through the harness and got a verdict
    assert all(sum(c["statuses"].values()) == 2 for c in calls)
    assert (tmp_path / "expert" / "rl_metrics.json").exists()
    AutoModelForCausalLM.from_pretrained(tmp_path / "expert")


def test_coverage_reward_dense_and_binary():
    task = next(t for t in TRAIN if t.id == "up_counter")
    ref = "```python\n" + task.reference_stimulus.read_text() + "```"
    weak = "```python\n" + task.trivial_stimulus.read_text() + "```"
    dense = CoverageReward([task], "dense", workers=2)([ref, weak, "nonsense"], task_id=[task.id] * 3)
    assert dense[0] == 1.0 and 0 < dense[1] < 1 and dense[2] == 0.0
    binary = CoverageReward([task], "binary", workers=2)([ref, weak], task_id=[task.id] * 2)
    assert binary == [1.0, 0.0]
    assert format_reward([ref, "```python\ndef (:\n```", "plain"]) == [1.0, 0.0, 0.0]


@pytest.fixture(scope="module")
def two_models(stages):
    return str(stages[0][0]), str(stages[1][0])


def merged(config, tmp_path, name):
    return weights(run_merge(config, tmp_path / name))


def test_linear_merge_is_the_average(two_models, tmp_path):
    a, b = two_models
    out = merged(write_mergekit_config("linear", [a, b], None), tmp_path, "linear")
    wa, wb = weights(a), weights(b)
    for key in out:
        torch.testing.assert_close(out[key], (wa[key] + wb[key]) / 2)
    assert (tmp_path / "linear" / "mergekit_config.yml").exists()


def test_slerp_endpoint_and_task_arithmetic_identity(base, two_models, tmp_path):
    a, b = two_models
    slerp0 = merged(write_mergekit_config("slerp", [a, b], None, {"t": 0.0}), tmp_path, "slerp")
    wa = weights(a)
    for key in slerp0:
        torch.testing.assert_close(slerp0[key], wa[key])
    # base + 1.0 * (expert - base) is the expert
    ta = merged(write_mergekit_config("task_arithmetic", [b], str(a), {"weight": 1.0}), tmp_path, "ta")
    wb = weights(b)
    for key in ta:
        torch.testing.assert_close(ta[key], wb[key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", ["ties", "dare_ties"])
def test_sparse_merges_are_finite_and_new(base, two_models, tmp_path, method):
    a, b = two_models
    out = merged(write_mergekit_config(method, [a, b], str(base), {"weight": 0.5, "density": 0.5}), tmp_path, method)
    wa, wb = weights(a), weights(b)
    key = "model.layers.0.mlp.up_proj.weight"
    assert all(torch.isfinite(v).all() for v in out.values())
    assert not torch.equal(out[key], wa[key]) and not torch.equal(out[key], wb[key])


def test_mergekit_config_rules():
    with pytest.raises(ValueError, match="exactly two"):
        write_mergekit_config("slerp", ["a", "b", "c"], None)
    with pytest.raises(ValueError, match="needs the base model"):
        write_mergekit_config("ties", ["a", "b"], None)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [(5, 0, 1, 0.0), (5, 5, 1, 1.0), (5, 2, 1, 0.4), (10, 3, 5, 1 - 21 / 252), (4, 1, 4, 1.0), (3, 1, 2, 2 / 3)],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_generation_writes_k_rows_and_resumes(base, tmp_path):
    tasks = TRAIN[:2]
    out = tmp_path / "gen.jsonl"
    sample_completions(base, tasks, 3, out, max_new_tokens=8)
    rows = read_jsonl(out)
    assert [(r["task_id"], r["sample_id"]) for r in rows] == [(t.id, i) for t in tasks for i in range(3)]
    # a killed run left two samples behind: the rerun keeps them and draws only the rest
    partial = tmp_path / "again.jsonl.partial"
    kept = [dict(rows[0], completion="KEPT-0"), dict(rows[1], completion="KEPT-1")]
    partial.write_text("".join(json.dumps(r) + "\n" for r in kept))
    stats = sample_completions(base, tasks, 3, tmp_path / "again.jsonl", max_new_tokens=8)
    again = read_jsonl(tmp_path / "again.jsonl")
    assert [r["completion"] for r in again[:2]] == ["KEPT-0", "KEPT-1"]
    assert stats["samples"] == 6 and len(again) == 6
    # sampling is seeded: a fresh run draws exactly the same samples
    sample_completions(base, tasks, 3, tmp_path / "fresh.jsonl", max_new_tokens=8)
    assert read_jsonl(tmp_path / "fresh.jsonl") == rows
