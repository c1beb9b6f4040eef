"""The RL loop's fast paths on CPU: the continuous-batching sampler against plain
`generate`, GRPO rollouts through it with the step breakdown, per-task simulation
timeouts from the reference's measured time, the compile rule of SFT's `auto` kernels,
and the GPU benchmark's smoke mode."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
from conftest import TINY_MODEL  # noqa: E402

from chorus.generate import resolve_sampler, sample_completions  # noqa: E402
from chorus.harness import SandboxLimits, ensure_build, score  # noqa: E402
from chorus.harness.timeouts import TimeoutPolicy, reference_timing, task_limits  # noqa: E402
from chorus.io import read_jsonl  # noqa: E402
from chorus.modeling import build_tiny_model, task_corpus  # noqa: E402
from chorus.rl import train_expert  # noqa: E402
from chorus.rollouts import resolve_rollout_backend, rollout_settings  # noqa: E402
from chorus.settings import GRPOExpert, Sampling  # noqa: E402
from chorus.sft import estimate_train_flops  # noqa: E402
from chorus.tasks import DEFAULT_TASK_ROOT, load_task, load_tasks  # noqa: E402
from chorus.training import kernel_settings  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURE_TASK = REPO / "tests" / "fixtures" / "tasks" / "fx_counter"
TRAIN = load_tasks(DEFAULT_TASK_ROOT, splits="train")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("speed") / "base"
    build_tiny_model(out, task_corpus(TRAIN), **TINY_MODEL)
    return out


# --- sampling ----------------------------------------------------------------------------


def test_auto_sampler_follows_the_device():
    assert resolve_sampler("auto", "cpu") == "generate"
    assert resolve_sampler("auto", "cuda") in ("static", "vllm")
    assert resolve_sampler("continuous", "cpu") == "continuous"
    with pytest.raises(ValueError):
        resolve_sampler("fast", "cpu")


@pytest.fixture(params=[True, False], ids=["vllm_installed", "no_vllm"])
def vllm_installed(request, monkeypatch):
    """vllm is not installed here: the selection is checked both ways by faking its spec."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (object() if request.param else None) if name == "vllm" else real(name, *a))
    return request.param


def test_config_keys_reach_vllm(vllm_installed):
    """eval.sampler and rl.rollout_backend choose vLLM: asked for, or `auto` on a GPU where
    the package is installed (TRL's colocate mode for the rollouts, also under DeepSpeed)."""
    expected = "vllm" if vllm_installed else "static"
    assert resolve_sampler("auto", "cuda") == expected
    assert resolve_sampler("auto", "cpu") == "generate"
    assert resolve_sampler("vllm", "cpu") == "vllm"
    assert resolve_rollout_backend("auto", on_gpu=True) == expected
    assert resolve_rollout_backend("auto", on_gpu=True, deepspeed=True) == ("vllm" if vllm_installed else "continuous")
    assert rollout_settings("auto", on_gpu=True)["use_vllm"] is vllm_installed
    assert rollout_settings("vllm", on_gpu=False)["use_vllm"] is True


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_vllm_sampler_without_the_package_names_it(tmp_path):
    with pytest.raises(RuntimeError, match="needs the vllm package"):
        sample_completions(tmp_path / "no-model", TRAIN[:1], 1, tmp_path / "out.jsonl", Sampling(sampler="vllm"))


def test_auto_rollout_backend_avoids_the_static_decoder_under_deepspeed():
    assert resolve_rollout_backend("auto", on_gpu=False) == "generate"
    on_gpu = resolve_rollout_backend("auto", on_gpu=True)
    assert on_gpu in ("static", "vllm")
    assert resolve_rollout_backend("auto", on_gpu=True, deepspeed=True) == ("continuous" if on_gpu == "static" else "vllm")
    assert resolve_rollout_backend("static", on_gpu=True, deepspeed=True) == "static"  # asked for: train_expert refuses it


@pytest.mark.parametrize("sampler", ["continuous", "static"])
def test_fast_samplers_match_generate_under_greedy_decoding(base, tmp_path, sampler):
    """The same completions as `generate` (greedy; one prompt at a time, so no padding
    changes the arithmetic), k rows per task, in order; the static decoder batched
    (left-padded prompts of different lengths) too, with 4 slots for the 6 rows (a slot
    takes the next row as its row ends)."""
    tasks = TRAIN[:3]
    plain = sample_completions(base, tasks, 2, tmp_path / "plain.jsonl",
                               Sampling(temperature=0, max_new_tokens=12, sampler="generate", batch_size=1),
                               device="cpu")
    fast = sample_completions(base, tasks, 2, tmp_path / "fast.jsonl",
                              Sampling(temperature=0, max_new_tokens=12, sampler=sampler, batch_size=4),
                              device="cpu")
    assert (plain["sampler"], fast["sampler"]) == ("generate", sampler)
    rows_plain, rows_fast = read_jsonl(tmp_path / "plain.jsonl"), read_jsonl(tmp_path / "fast.jsonl")
    assert [(r["task_id"], r["sample_id"]) for r in rows_fast] == [(t.id, i) for t in tasks for i in range(2)]
    assert [r["completion"] for r in rows_fast] == [r["completion"] for r in rows_plain]
    assert fast["new_tokens"] == plain["new_tokens"] > 0


def static_decoder_on_prompts(model_dir, tasks):
    """(model, tokenizer, left-padded prompt batch of `tasks`, StaticDecoder) on CPU."""
    from chorus.generate import StaticDecoder
    from chorus.modeling import load_model_and_tokenizer
    from chorus.prompts import build_prompt, render_prompt

    model, tokenizer = load_model_and_tokenizer(model_dir, "cpu")
    model.eval()
    tokenizer.padding_side = "left"
    inputs = tokenizer([render_prompt(tokenizer, build_prompt(t)) for t in tasks], return_tensors="pt",
                       padding=True, add_special_tokens=False)
    return model, tokenizer, inputs, StaticDecoder(model)


def test_static_decoder_stops_like_generate(base):
    """A stop id ends a row where `generate` ends it: same tokens up to and including the
    stop, padding after, lengths counting the stop."""
    import torch

    model, tokenizer, inputs, decoder = static_decoder_on_prompts(base, TRAIN[:2])
    free, free_lengths = decoder.generate(inputs["input_ids"], inputs["attention_mask"], max_new_tokens=10,
                                          temperature=0, pad_id=tokenizer.pad_token_id)
    assert free.shape == (2, 10) and free_lengths.tolist() == [10, 10]
    stop = int(free[0, 4])  # a token the first row draws at its fifth step
    tokens, lengths = decoder.generate(inputs["input_ids"], inputs["attention_mask"], max_new_tokens=10,
                                       temperature=0, stop_ids=[stop], pad_id=tokenizer.pad_token_id)
    reference = model.generate(**inputs, max_new_tokens=10, do_sample=False, eos_token_id=stop,
                               pad_token_id=tokenizer.pad_token_id)[:, inputs["input_ids"].shape[1]:]
    first = free[0].tolist().index(stop)
    assert int(lengths[0]) == first + 1 and tokens[0, : first + 1].tolist() == free[0, : first + 1].tolist()
    assert (tokens[0, first + 1 :] == tokenizer.pad_token_id).all()
    for row in range(2):
        n = int(lengths[row])
        assert tokens[row, :n].tolist() == reference[row, :n].tolist()
    assert torch.equal(tokens[:, : reference.shape[1]], reference[:, : tokens.shape[1]])


def test_static_decoder_reports_rows_as_they_stop(base):
    """on_finished hears of each row once, with the ids generate returns for it; a row that
    stops early is reported while the other rows still decode."""
    import torch

    model, tokenizer, inputs, decoder = static_decoder_on_prompts(base, TRAIN[:3])
    torch.manual_seed(0)  # sampled (greedy rows of this tiny model all alike), the same draws in both runs
    free, _ = decoder.generate(inputs["input_ids"], inputs["attention_mask"], max_new_tokens=48, temperature=1.0,
                               pad_id=tokenizer.pad_token_id)
    # a token the first row draws within 8 steps and the others never: only the first row stops
    stop = next(int(t) for t in free[0, :8] if not (free[1:] == t).any())
    steps = []
    forward = model.forward
    model.forward = lambda *args, **kwargs: steps.append(1) or forward(*args, **kwargs)
    heard = {}
    torch.manual_seed(0)
    tokens, lengths = decoder.generate(
        inputs["input_ids"], inputs["attention_mask"], max_new_tokens=48, temperature=1.0, stop_ids=[stop],
        pad_id=tokenizer.pad_token_id, on_finished=lambda row, ids: heard.setdefault(row, (ids, len(steps))))
    assert sorted(heard) == [0, 1, 2]
    for row, (ids, _) in heard.items():
        assert ids == tokens[row, : int(lengths[row])].tolist()
    assert heard[0][0][-1] == stop and heard[0][1] < len(steps)  # heard of before the decoding ended
    assert lengths[1:].tolist() == [48, 48] and heard[1][1] == heard[2][1] == len(steps)


def test_static_decoder_drops_finished_rows_from_the_batch(base, monkeypatch):
    """Once at most half the rows are live, the finished rows leave the batch: later steps
    run on the live rows only, every row gets the tokens it gets without compaction
    (greedy), in the caller's order, and on_finished hears of each caller's row once."""
    from chorus.generate import StaticDecoder

    model, tokenizer, inputs, _ = static_decoder_on_prompts(base, TRAIN[:6])
    run = dict(max_new_tokens=40, temperature=0, pad_id=tokenizer.pad_token_id)
    plain, compacting = StaticDecoder(model, compact=False), StaticDecoder(model)
    compacting.CHECK_EVERY = plain.CHECK_EVERY = 4
    compacting.COMPACT_MIN_ROWS = 2
    rows = plain.generate(inputs["input_ids"], inputs["attention_mask"], **run)[0].tolist()
    # a stop token that most rows draw within 12 steps and some row never draws
    stop = max((t for t in set(sum(rows, [])) if any(t not in r for r in rows)),
               key=lambda t: sum(t in r[:12] for r in rows))
    assert sum(stop in r[:12] for r in rows) >= 3
    expected, expected_lengths = plain.generate(inputs["input_ids"], inputs["attention_mask"], stop_ids=[stop], **run)
    batch_sizes, heard = [], {}
    forward = model.forward
    monkeypatch.setattr(model, "forward",
                        lambda *a, **kw: batch_sizes.append(kw["input_ids"].shape[0]) or forward(*a, **kw))
    tokens, lengths = compacting.generate(inputs["input_ids"], inputs["attention_mask"], stop_ids=[stop], **run,
                                          on_finished=lambda row, ids: heard.setdefault(row, []).append(ids))
    assert tokens.tolist() == expected.tolist() and lengths.tolist() == expected_lengths.tolist()
    assert batch_sizes[0] == 6 and min(batch_sizes) <= 3  # the later steps ran on the live rows
    assert sorted(heard) == list(range(6))
    assert all(heard[row] == [tokens[row, : int(lengths[row])].tolist()] for row in range(6))


def test_static_decoder_frees_its_cache_when_the_run_ends(base):
    """Nothing of a run outlives it without Python's cyclic collector: no cache layer (the
    KV tensors) and no run state stays allocated beside the training step that follows a
    rollout batch, with slots refilled (prefills into caches of their own) and compaction."""
    import gc

    from transformers.cache_utils import StaticLayer

    from chorus.generate import StaticDecoder, _DecodeRun

    model, tokenizer, inputs, _ = static_decoder_on_prompts(base, TRAIN[:6])
    decoder = StaticDecoder(model)
    decoder.CHECK_EVERY, decoder.COMPACT_MIN_ROWS = 4, 2
    gc.collect()
    gc.disable()
    try:
        for slots in (None, 2):
            decoder.generate(inputs["input_ids"], inputs["attention_mask"], max_new_tokens=24, temperature=0,
                             pad_id=tokenizer.pad_token_id, slots=slots)
        left = [type(o).__name__ for o in gc.get_objects() if isinstance(o, (StaticLayer, _DecodeRun))]
    finally:
        gc.enable()
    assert left == []


def test_static_decoder_refills_slots_as_rows_end(base, monkeypatch):
    """With fewer slots than rows, a slot whose row has ended takes the next waiting row:
    every row gets the tokens it gets when all rows decode at once (greedy), in the
    caller's order, and on_finished hears of each row once; no forward runs more rows than
    the slots; the rows take fewer decode steps than chunks of that many rows one after
    another, which wait for their longest row."""
    from chorus.generate import StaticDecoder

    model, tokenizer, inputs, _ = static_decoder_on_prompts(base, TRAIN[:6])
    decoder = StaticDecoder(model)
    decoder.CHECK_EVERY = 4
    run = dict(max_new_tokens=40, temperature=0, pad_id=tokenizer.pad_token_id)
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    rows = decoder.generate(ids, mask, **run)[0].tolist()
    # a stop token that some rows draw early and some row never draws: rows of uneven lengths
    stop = max((t for t in set(sum(rows, [])) if any(t not in r for r in rows)),
               key=lambda t: len({r.index(t) if t in r else None for r in rows}))
    expected, expected_lengths = decoder.generate(ids, mask, stop_ids=[stop], **run)
    assert len(set(expected_lengths.tolist())) > 2
    shapes = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **kw: shapes.append(tuple(kw["input_ids"].shape)) or forward(
        *a, **kw))
    heard: dict = {}
    tokens, lengths = decoder.generate(ids, mask, stop_ids=[stop], **run, slots=2,
                                       on_finished=lambda row, ids: heard.setdefault(row, []).append(ids))
    assert tokens.tolist() == expected.tolist() and lengths.tolist() == expected_lengths.tolist()
    assert sorted(heard) == list(range(6))
    assert all(heard[row] == [tokens[row, : int(lengths[row])].tolist()] for row in range(6))
    assert max(rows for rows, _ in shapes) <= 2
    assert sum(width > 1 for _, width in shapes) >= 3  # prefills: the first two rows, then one per freed slot
    refilled_steps = sum(width == 1 for _, width in shapes)
    shapes.clear()
    for first in range(0, 6, 2):
        decoder.generate(ids[first : first + 2], mask[first : first + 2], stop_ids=[stop], **run)
    assert refilled_steps < sum(width == 1 for _, width in shapes)
    # refilled, then compacted once no row waits: the same tokens
    decoder.COMPACT_MIN_ROWS = 2
    shapes.clear()
    tokens, lengths = decoder.generate(ids, mask, stop_ids=[stop], **run, slots=4)
    assert tokens.tolist() == expected.tolist() and lengths.tolist() == expected_lengths.tolist()
    assert {rows for rows, width in shapes if width == 1} >= {4, 2}


def test_decode_attention_attends_per_kv_head(monkeypatch):
    """A one-token query with grouped KV heads (SmolLM2: 9 query heads, 3 KV heads) is
    attended per KV head without copying the cache (no repeat_kv, which transformers'
    sdpa uses under torch.compile), over the mask's prefix of the keys: the same output as
    attention with the KV heads expanded."""
    import types

    import torch
    from transformers.integrations import sdpa_attention

    from chorus.generate import _prefix_sdpa

    torch.manual_seed(0)
    batch, heads, kv_heads, dim, slots, width = 3, 6, 2, 8, 20, 12
    module = types.SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True, training=False)
    query = torch.randn(batch, heads, 1, dim)
    key, value = torch.randn(batch, kv_heads, slots, dim), torch.randn(batch, kv_heads, slots, dim)
    mask = torch.rand(batch, 1, 1, width) > 0.3
    mask[:, ..., 0] = True
    expanded = torch.nn.functional.scaled_dot_product_attention(
        query, key[:, :, :width].repeat_interleave(3, 1), value[:, :, :width].repeat_interleave(3, 1),
        attn_mask=mask, scale=0.5).transpose(1, 2)
    copies, repeat_kv = [], sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "is_torchdynamo_compiling", lambda: True)  # as under torch.compile
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda *a: copies.append(a) or repeat_kv(*a))
    out, _ = _prefix_sdpa(module, query, key, value, mask, dropout=0.0, scaling=0.5)
    assert out.shape == (batch, 1, heads, dim) and torch.allclose(out, expanded, atol=1e-6)
    assert not copies


def test_compiled_decode_steps_give_the_same_tokens(base):
    """With compile, the decode steps run the model's decoder layers through inductor (one
    graph per layer whatever the prefix view or batch size) and give the tokens of the
    uncompiled steps, greedy and sampled from the same seed; the prefill and the model
    after `generate` are the uncompiled model."""
    import torch
    from torch._dynamo.utils import counters

    from chorus.generate import StaticDecoder

    model, tokenizer, inputs, _ = static_decoder_on_prompts(base, TRAIN[:6])
    layers = StaticDecoder(model)._repeated_layers()
    assert len(layers) == model.config.num_hidden_layers
    compiled, plain = StaticDecoder(model, kv_block=8, compile=True), StaticDecoder(model, kv_block=8, compile=False)
    for decoder in (compiled, plain):  # a batch that shrinks mid-way, over several prefix views
        decoder.CHECK_EVERY, decoder.COMPACT_MIN_ROWS = 4, 2
    run = dict(max_new_tokens=24, temperature=0, pad_id=tokenizer.pad_token_id)
    expected = plain.generate(inputs["input_ids"], inputs["attention_mask"], **run)[0]
    stop = int(torch.mode(expected[:, :8].flatten()).values)  # most rows stop early: the batch compacts
    graphs_before = counters["stats"]["unique_graphs"]
    results = {}
    for name, decoder in (("compiled", compiled), ("plain", plain)):
        torch.manual_seed(3)
        results[name] = (decoder.generate(inputs["input_ids"], inputs["attention_mask"], stop_ids=[stop], **run),
                         decoder.generate(inputs["input_ids"], inputs["attention_mask"], **{
                             **run, "temperature": 0.9}, top_p=0.9, stop_ids=[stop]))
    assert compiled.compiled  # no fall-back to uncompiled steps
    assert counters["stats"]["unique_graphs"] - graphs_before == model.config.num_hidden_layers
    for (tokens, lengths), (want, want_lengths) in zip(results["compiled"], results["plain"]):
        assert tokens.tolist() == want.tolist() and lengths.tolist() == want_lengths.tolist()
    assert all(layer._compiled_call_impl is None for layer in layers)


def test_static_decoder_reads_only_the_filled_cache_prefix(base, monkeypatch):
    """Decode steps attend to the cache's filled prefix, rounded up to kv_block slots, not
    to the whole static cache: narrower keys, the same greedy tokens as the whole cache
    and as `generate`; the model's own attention is back afterwards."""
    import chorus.generate as generate

    model, tokenizer, inputs, _ = static_decoder_on_prompts(base, TRAIN[:2])
    widths = []
    attention = generate._prefix_sdpa
    monkeypatch.setattr(generate, "_prefix_sdpa", lambda module, q, k, v, mask, **kw: (
        widths.append((q.shape[2], mask.shape[-1] if mask is not None else None, k.shape[2]))
        or attention(module, q, k, v, mask, **kw)))
    run = dict(max_new_tokens=20, temperature=0, pad_id=tokenizer.pad_token_id)
    narrow, _ = generate.StaticDecoder(model, kv_block=8).generate(inputs["input_ids"], inputs["attention_mask"],
                                                                   **run)
    prompt_len = inputs["input_ids"].shape[1]
    decode = [(mask, cache) for q, mask, cache in widths if q == 1]
    # the cache holds one spare slot past prompt + new tokens, so every view is a strict prefix
    assert len(decode) == 19 * model.config.num_hidden_layers and all(cache == prompt_len + 21 for _, cache in decode)
    assert min(mask for mask, _ in decode) < prompt_len + 20  # keys cut to the filled prefix
    assert all(mask % 8 == 0 or mask == prompt_len + 20 for mask, _ in decode)
    assert model.config._attn_implementation == "sdpa"
    whole, _ = generate.StaticDecoder(model, kv_block=None).generate(inputs["input_ids"], inputs["attention_mask"],
                                                                     **run)
    reference = model.generate(**inputs, max_new_tokens=20, do_sample=False, pad_token_id=tokenizer.pad_token_id,
                               eos_token_id=None)[:, prompt_len:]
    assert narrow.tolist() == whole.tolist() == reference.tolist()


def test_token_draws_follow_the_nucleus():
    """draw_tokens (the static decoder's sampler: an exponential race, no multinomial)
    picks tokens with their softmax probabilities, renormalised over the top-p nucleus."""
    import torch

    from chorus.generate import draw_tokens

    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0]]).repeat(40_000, 1)
    probs = logits[0].softmax(-1)
    torch.manual_seed(0)
    counts = torch.bincount(draw_tokens(logits, 1.0), minlength=5) / 40_000
    assert torch.allclose(counts, probs, atol=0.01)
    nucleus = int((probs.cumsum(-1) - probs <= 0.8).sum())  # the smallest prefix reaching 0.8: 3 tokens
    counts = torch.bincount(draw_tokens(logits, 1.0, top_p=0.8), minlength=5) / 40_000
    assert nucleus == 3 and counts[nucleus:].sum() == 0
    assert torch.allclose(counts[:nucleus], probs[:nucleus] / probs[:nucleus].sum(), atol=0.01)
    hot = torch.bincount(draw_tokens(logits, 2.0), minlength=5) / 40_000
    assert torch.allclose(hot, (logits[0] / 2).softmax(-1), atol=0.01)
    assert draw_tokens(logits[:2], 0).tolist() == [0, 0]


@pytest.mark.parametrize("sampler", ["continuous", "static"])
def test_fast_sampling_is_seeded(base, tmp_path, sampler):
    tasks = TRAIN[:2]
    for name in ("a", "b"):
        sample_completions(base, tasks, 3, tmp_path / f"{name}.jsonl",
                           Sampling(temperature=1.0, top_p=0.9, max_new_tokens=10, sampler=sampler),
                           device="cpu", seed=7)
    first, again = read_jsonl(tmp_path / "a.jsonl"), read_jsonl(tmp_path / "b.jsonl")
    assert first == again
    assert len({r["completion"] for r in first}) > 1  # sampled, not greedy


# --- GRPO rollouts -----------------------------------------------------------------------


def test_rollout_backends():
    assert rollout_settings("auto", on_gpu=False) == {"use_vllm": False, "use_transformers_continuous_batching": False}
    assert rollout_settings("continuous")["use_transformers_continuous_batching"] is True
    assert rollout_settings("static") == rollout_settings("generate")  # the trainer's hook is swapped instead
    assert rollout_settings("vllm") == {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.3}
    with pytest.raises(ValueError):
        rollout_settings("fast")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["continuous", "static"])
def test_grpo_rollouts_through_fast_backends_with_breakdown(base, tmp_path, backend):
    tasks = [t for t in TRAIN if t.difficulty == "easy"][:2]
    expert = GRPOExpert(steps=2, num_generations=2, batch_size=2, max_completion_length=8, rollout_backend=backend)
    metrics = train_expert(base, tasks, tmp_path / "expert", expert, sim_workers=2, use_cpu=True,
                           sim_timeouts=TimeoutPolicy())
    assert metrics["steps"] == 2
    assert metrics["rollout_backend"] == backend
    parts = metrics["breakdown"]
    assert parts["rollouts"] == 4 and 0 < parts["rollout_tokens"] <= 4 * 8
    assert parts["simulations"] + parts["duplicates"] == 4 and parts["simulations"] >= 1
    # every rollout's simulation started before TRL asked for the rewards (start_rewards_early),
    # unless an earlier call's verdict answered it
    assert all(call["started_early"] + call["reused"] >= 1 for call in metrics["reward_calls"])
    assert 1 <= parts["simulations_started_early"] <= parts["simulations"]
    assert 0 < parts["generation_s"] < parts["steps_s"] and 0 < parts["reward_wait_s"] < parts["steps_s"]
    assert parts["generation_s"] + parts["reward_wait_s"] + parts["train_other_s"] == pytest.approx(parts["steps_s"])
    assert 0 < parts["reward_wait_fraction"] < 1


@pytest.mark.slow
def test_an_expert_out_of_time_is_saved_with_the_steps_it_trained(base, tmp_path):
    """rl.time_budget_s: a budget that one rollout batch already uses up ends training
    after that batch (1 of 3 steps); the expert is saved and says why it stopped."""
    tasks = [t for t in TRAIN if t.difficulty == "easy"][:1]
    expert = GRPOExpert(steps=3, num_generations=2, batch_size=2, max_completion_length=8, rollout_backend="static",
                        time_budget_s=1e-3)
    metrics = train_expert(base, tasks, tmp_path / "expert", expert, sim_workers=2, use_cpu=True,
                           sim_timeouts=TimeoutPolicy())
    assert metrics["steps"] == 1 and metrics["stopped_by_time_budget"] is True
    saved = json.loads((tmp_path / "expert" / "rl_metrics.json").read_text())
    assert saved["steps"] == 1 and (tmp_path / "expert" / "config.json").exists()


@pytest.mark.slow
def test_one_rollout_batch_serves_several_steps(base, tmp_path):
    """rl.steps_per_generation: two optimizer steps learn from one rollout batch of twice
    the step's completions, sampled and simulated in one go; the batch needs two prompts
    and there is one task: it is drawn twice (TRL would otherwise train no step at all).
    The rollouts' decode steps run compiled (rollout_compile: CPU inductor here), 3 rows at
    a time (rollout_slots: the fourth takes the first slot that frees), sampled at the
    expert's temperature and top_p."""
    tasks = [t for t in TRAIN if t.difficulty == "easy"][:1]
    expert = GRPOExpert(steps=2, num_generations=2, batch_size=2, steps_per_generation=2, max_completion_length=8,
                        rollout_backend="static", rollout_compile=True, rollout_slots=3, temperature=0.7, top_p=0.8)
    metrics = train_expert(base, tasks, tmp_path / "expert", expert, sim_workers=2, use_cpu=True,
                           sim_timeouts=TimeoutPolicy())
    assert metrics["steps"] == 2 and metrics["rollout_compile"] is True and metrics["rollout_slots"] == 3
    assert metrics["sampling"] == {"temperature": 0.7, "top_p": 0.8, "max_completion_length": 8}
    assert [call["n"] for call in metrics["reward_calls"]] == [4]
    assert metrics["breakdown"]["rollouts"] == 4


@pytest.mark.slow  # simulates
def test_simulations_started_early_give_the_same_rewards():
    """CoverageReward.start: the call takes the started simulations' results (the same
    rewards as simulating them in the call) and forgets starts the call did not need."""
    from chorus.reward import CoverageReward

    tasks = [t for t in TRAIN if t.difficulty == "easy"][:2]
    fenced = ["```python\n" + t.reference_stimulus.read_text() + "```" for t in tasks]
    completions = [fenced[0], "no code at all", fenced[1], fenced[0]]
    task_ids = [tasks[0].id, tasks[0].id, tasks[1].id, tasks[0].id]
    early, plain = CoverageReward(tasks, workers=2), CoverageReward(tasks, workers=2)
    early.start(tasks[0].id, fenced[0])
    early.start(tasks[1].id, [{"role": "assistant", "content": fenced[1]}])  # TRL's conversational form
    early.start(tasks[1].id, "```python\nraise SystemExit\n```")  # not among the call's completions
    early.start("no_such_task", fenced[0])  # not a task of this reward: ignored
    rewards = early(completions, task_id=task_ids)
    assert rewards == plain(completions, task_id=task_ids)
    assert rewards[0] == rewards[3] == 1.0 and rewards[2] == 1.0 and rewards[1] == 0.0
    assert early.calls[-1]["started_early"] == 2 and plain.calls[-1]["started_early"] == 0
    assert early.calls[-1]["statuses"] == {"ok": 3, "syntax_error": 1}
    assert early.calls[-1]["simulated"] == 3 and early.calls[-1]["duplicates"] == 1
    again = early(completions[:1], task_id=task_ids[:1])  # no start carried over: the last call's verdict
    assert again == [1.0] and early.calls[-1]["started_early"] == 0 and early.calls[-1]["reused"] == 1


@pytest.mark.slow  # builds
def test_closed_reward_lets_the_process_exit_before_its_queued_builds(tmp_path):
    """A GRPO job's process ends when training ends (train_expert closes its reward):
    the background builds not started yet are dropped, so the interpreter's exit waits
    for at most the builds in flight, not for every design of the task set."""
    script = (
        "from chorus.reward import CoverageReward\n"
        "from chorus.tasks import DEFAULT_TASK_ROOT, load_tasks\n"
        "CoverageReward(load_tasks(DEFAULT_TASK_ROOT), workers=1).close()\n"
    )
    cache = tmp_path / "verilator"
    env = {**os.environ, "CHORUS_CACHE_DIR": str(cache), "CCACHE_DISABLE": "1"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=600)
    designs = len({t.design_hash() for t in load_tasks(DEFAULT_TASK_ROOT)})
    built = [d for d in cache.iterdir() if d.is_dir()] if cache.exists() else []
    assert designs > 10 and len(built) <= 2  # the two prebuild threads' first designs at most


# --- per-task simulation timeouts --------------------------------------------------------


def _fixture_copy(tmp_path: Path, reference: str | None = None):
    """The fixture task with a reference of its own (a distinct timing cache entry)."""
    folder = Path(shutil.copytree(FIXTURE_TASK, tmp_path / "fx_counter"))
    task = load_task(folder)
    text = reference if reference is not None else task.reference_stimulus.read_text()
    task.reference_stimulus.write_text(f"{text}\n# {uuid.uuid4().hex}\n")
    return load_task(folder)


HANG = "import cocotb\n\n@cocotb.test()\nasync def spin(dut):\n    while True:\n        pass\n"


@pytest.mark.slow
def test_per_task_timeout_from_the_reference_stops_a_straggler(tmp_path):
    task = _fixture_copy(tmp_path)
    ceiling = SandboxLimits(timeout_s=60)
    policy = TimeoutPolicy(factor=3.0, floor_s=2.0)
    build = ensure_build(task)
    # concurrent scorers measure the reference once and share the cached figure
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(reference_timing(task, build, ceiling))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 3 and seen[0] == seen[1] == seen[2] and seen[0]["passed"]
    cached = list(build.glob("reference_time_*.json"))
    assert seen[0] in [json.loads(p.read_text()) for p in cached]
    limits = task_limits(task, build, ceiling, policy)
    assert limits.timeout_s == pytest.approx(max(2.0, 3.0 * seen[0]["wall_s"]))
    assert limits.timeout_s < ceiling.timeout_s and limits.mem_mb == ceiling.mem_mb
    result = score(task, HANG, limits=ceiling, timeouts=policy)
    assert result.status == "timeout" and not result.passed
    assert result.sim_time_s < ceiling.timeout_s  # stopped by the task's limit, not the ceiling
    # the reference still passes under its task's limit
    assert score(task, task.reference_stimulus.read_text(), limits=ceiling, timeouts=policy).passed


@pytest.mark.slow
def test_no_per_task_limit_without_a_passing_reference(tmp_path):
    task = _fixture_copy(tmp_path, reference="raise RuntimeError('not a testbench')")
    ceiling = SandboxLimits(timeout_s=45)
    assert task_limits(task, ensure_build(task), ceiling, TimeoutPolicy()).timeout_s == 45
    assert task_limits(task, ensure_build(task), ceiling, None) is ceiling
    assert TimeoutPolicy.from_config({"timeout_factor": None}) is None
    assert TimeoutPolicy.from_config({"timeout_factor": 4, "timeout_floor_s": 1}) == TimeoutPolicy(4.0, 1.0)


@pytest.mark.slow
def test_a_reference_cut_off_by_a_lower_ceiling_is_measured_again(tmp_path):
    task = _fixture_copy(tmp_path)
    build = ensure_build(task)
    # a run with a ceiling too short for the reference caches a failure...
    low = reference_timing(task, build, SandboxLimits(timeout_s=0.05))
    assert not low["passed"] and low["limit_s"] == 0.05
    # ...which a higher ceiling does not trust: it measures again, and the pass is cached
    high = reference_timing(task, build, SandboxLimits(timeout_s=60))
    assert high["passed"] and high["limit_s"] == 60
    assert reference_timing(task, build, SandboxLimits(timeout_s=0.05)) == high  # a pass holds for any ceiling


# --- SFT kernels --------------------------------------------------------------------------


def test_auto_compiles_kernels_only_for_jobs_that_pay(base, tmp_path):
    small = kernel_settings("auto", "auto", on_gpu=True, train_flops=1e12, compile_min_flops=5.5e16)
    large = kernel_settings("auto", "auto", on_gpu=True, train_flops=1e18, compile_min_flops=5.5e16)
    assert small == {"attn_implementation": "sdpa", "padding_free": False, "use_liger_kernel": False}
    assert large["attn_implementation"] == "flex_attention" and large["padding_free"]
    assert kernel_settings("auto", "auto", on_gpu=True, train_flops=1e12, compile_min_flops=None)["padding_free"]
    assert kernel_settings("flex_attention", False, on_gpu=True, train_flops=1, compile_min_flops=1e20)[
        "attn_implementation"] == "flex_attention"  # explicit wins
    assert kernel_settings("auto", "auto", on_gpu=False, train_flops=1e20)["attn_implementation"] == "sdpa"

    from datasets import load_dataset

    from chorus.data import build_stage_dataset
    from chorus.modeling import load_tokenizer

    build_stage_dataset(TRAIN[:3], {"format": True}, tmp_path / "d.jsonl")
    data = load_dataset("json", data_files=str(tmp_path / "d.jsonl"), split="train")
    tokenizer = load_tokenizer(base)
    one = estimate_train_flops(base, data, tokenizer, epochs=1, max_steps=-1, examples_per_step=2)
    assert one > 0
    assert estimate_train_flops(base, data, tokenizer, epochs=2, max_steps=-1, examples_per_step=2) == \
        pytest.approx(2 * one)
    assert estimate_train_flops(base, data, tokenizer, epochs=2, max_steps=1, examples_per_step=1) == \
        pytest.approx(one / len(data))


# --- the GPU benchmark, smoke mode --------------------------------------------------------


@pytest.mark.slow
def test_rl_loop_benchmark_smoke(tmp_path):
    out = tmp_path / "rl_loop.json"
    # a run of other settings at the same batch, from an earlier invocation: kept beside this one's
    earlier = {"rollout_tokens_per_s": 1e-6, "command": "an earlier run"}
    out.write_text(json.dumps({"details": {"grpo_batch4": {"static_slots2": earlier}}}))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    # simulations niced: the run names itself so (static_nice3) and records it
    command = [sys.executable, str(REPO / "benchmarks" / "rl_loop.py"), "--smoke", "--grpo-late", "--sim-nice", "3",
               "--out", str(out),
               "--only", "decode", "generate", "rewards", "grpo", "sft",
               "--baseline-decoder", str(REPO / "src" / "chorus" / "generate.py")]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(out.read_text())
    for key in ("generate_tokens_per_s", "rollout_tokens_per_s", "reward_wait_fraction", "sft_first_step_s"):
        assert isinstance(result[key], (int, float)) and result[key] > 0, (key, result[key])
    assert {"decode", "generate", "grpo_batch4", "sft"} <= result["details"].keys()  # smoke: 2 tasks x 2 completions
    decode = result["details"]["decode"]
    for case in ("batch4", "batch8", "batch8_long", "batch8_stragglers"):  # against a baseline file's decoder
        assert decode[f"{case}/step_graph_prefix"]["speedup_vs_baseline"] > 0
        assert decode[f"{case}/baseline"]["tokens_per_s"] > 0, decode[f"{case}/baseline"]
    assert decode["batch8_stragglers/step_graph_prefix_no_compaction"]["tokens_per_s"] > 0
    for name in ("slots8_calls", "slots8_refill", "step_graph_prefix"):  # 16 uneven rows: 8 slots, or all at once
        assert decode[f"batch16_stragglers/{name}"]["new_tokens"] > 0
    profile = decode["profile"]  # a decode step's time by operator (CPU here), the prefill subtracted
    assert profile["ms_per_step"] > 0 and profile["top"], profile
    assert sum(entry["share"] for entry in profile["top"]) <= 1 + 1e-9
    assert result["details"]["grpo_best"] == "grpo_batch4/static_nice3"
    runs = result["details"]["grpo_batch4"]
    assert result["rollout_tokens_per_s"] == runs["static_nice3"]["rollout_tokens_per_s"]
    assert runs["static_nice3"]["simulations_started_early"] >= 1
    assert runs["static_nice3_late"]["simulations_started_early"] == 0
    assert runs["static_nice3"]["sim_nice"] == 3 and runs["static_nice3"]["rollout_compile"] is False
    assert runs["static_slots2"] == earlier and "--sim-nice 3" in runs["static_nice3"]["command"]
    assert result["details"]["generate"]["continuous"]["tokens_per_s"] > 0
    assert result["details"]["generate"]["generate"]["tokens_per_s"] > 0


def test_rl_loop_grpo_in_micro_batches(tmp_path):
    """--grpo-grad-accum splits each optimizer step's completions into micro-batches
    (rl.grad_accum) and --grpo-steps-per-generation counts micro-batches: 2 tasks x 2
    completions in 2 micro-batches of 2, 4 of them a rollout batch of 8; the run is named
    and recorded so."""
    out = tmp_path / "rl_loop.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, str(REPO / "benchmarks" / "rl_loop.py"), "--smoke", "--only", "grpo",
               "--grpo-grad-accum", "2", "--grpo-steps-per-generation", "4", "--grpo-backends", "generate",
               "--out", str(out)]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    run = json.loads(out.read_text())["details"]["grpo_batch2a2x4"]["generate"]
    assert (run["completions_per_step"], run["grad_accum"], run["rollout_batch"]) == (4, 2, 8)
    assert run["steps"] == 1 and run["rollouts"] == 8


def test_rl_loop_measures_the_cost_of_a_round(tmp_path):
    """--grpo-rounds 1 2: the same expert with one- and two-round episodes in one run (the
    tiny model never passes, so every episode answers twice), and the cost of the second
    round as ratios against the first."""
    out = tmp_path / "rl_loop.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    command = [sys.executable, str(REPO / "benchmarks" / "rl_loop.py"), "--smoke", "--only", "grpo",
               "--grpo-backends", "static", "--grpo-rounds", "1", "2", "--out", str(out)]
    proc = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    details = json.loads(out.read_text())["details"]
    one, two = details["grpo_batch4"]["static"], details["grpo_batch4"]["static_rounds2"]
    assert (one["rounds"], one["round_episodes"], two["rounds"]) == (1, None, 2)
    assert two["round_episodes"] and all(batch["rounds_used"] == [2] * 4 for batch in two["round_episodes"])
    assert len(two["rollout_batches"]) == 2 * len(one["rollout_batches"])  # each round's generation timed
    cost = details["grpo_batch4_rounds_cost"]["static_rounds2"]
    assert cost["rollout_tokens_ratio"] == two["rollout_tokens"] / one["rollout_tokens"] > 1
    assert cost["runtime_ratio"] > 0 and cost["generation_ratio"] > 0
    assert details["grpo_best"] == "grpo_batch4/static"  # the headline stays a one-round figure


def test_static_decoder_prefills_long_batches_in_groups(base, monkeypatch):
    """A batch of more prompt tokens than one prefill takes (PREFILL_TOKENS) is prefilled in
    groups, none over the bound, each row's keys copied into its slot: every row gets the
    tokens of the one-prefill run (greedy), with and without refilled slots."""
    from chorus.generate import StaticDecoder

    model, tokenizer, inputs, _ = static_decoder_on_prompts(base, TRAIN[:5])
    ids, mask = inputs["input_ids"], inputs["attention_mask"]
    run = dict(max_new_tokens=24, temperature=0, pad_id=tokenizer.pad_token_id)
    expected, expected_lengths = StaticDecoder(model).generate(ids, mask, **run)
    grouped = StaticDecoder(model)
    grouped.PREFILL_TOKENS = 2 * ids.shape[1]  # two rows a prefill
    prefills = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **kw: (kw["input_ids"].shape[1] > 1 and prefills.append(
        kw["input_ids"].shape[0])) or forward(*a, **kw))
    for slots in (None, 3):
        prefills.clear()
        tokens, lengths = grouped.generate(ids, mask, **run, slots=slots)
        assert tokens.tolist() == expected.tolist() and lengths.tolist() == expected_lengths.tolist()
        assert prefills and max(prefills) <= 2 and sum(prefills) == 5
