"""The RL loop at hardware speed (issue 15): sampling, GRPO breakdown, SFT cold start.

One command on the GPU machine (under 9 minutes), with the project's own code paths:
  (a) evaluation sampler tokens/s, prompts of ~1k tokens, 512 new tokens, batch 64 (and
      256): plain `generate` vs transformers' continuous batching (`generate_batch`, the
      `auto` sampler on a GPU without vLLM), engine-only and end to end through
      `chorus.generate.sample_completions`;
  (b) one GRPO expert end to end (`chorus.rl.train_expert`, rollouts through the `auto`
      backend, per-task simulation timeouts): generation, reward wait, the rest
      (log-probs, backward, optimizer), rollout tokens/s, simulations/s; and one reward
      call on runnable completions (references) with a hanging straggler among them;
      `--sim-nice`, `--grpo-compile`, `--grpo-slots` vary the simulations' niceness and
      the static rollouts (compiled steps, refilled slots), each run named after them;
  (c) the first SFT step (`chorus.sft.train_stage`) with sdpa and with the compiled
      kernels (flex_attention + Liger), each in a fresh process with an empty compile
      cache, then the compiled one again with the cache warm; from these and the steady
      rates, the job size (training FLOPs) from which compiling pays
      (config `sft.compile_min_flops`).
`--only decode`: the static decoder alone, step by step (bench_decode).
The model: `--model DIR` (a Hugging Face folder, e.g. SmolLM2-135M-Instruct converted),
else a random-init model of SmolLM2-135M's shape (config only, no download).
Writes `--out` (default benchmarks/results/rl_loop_h200.json) after every section with
the keys generate_tokens_per_s, rollout_tokens_per_s, reward_wait_fraction,
sft_first_step_s and `details`. `--smoke`: tiny sizes on CPU (tests/test_rl_speed.py).

  USE_HUB_KERNELS=0 PYTHONPATH=src python3 benchmarks/rl_loop.py --model /root/smollm2 --out $OUT/rl_loop_h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("USE_HUB_KERNELS", "0")  # transformers 5.25: hub kernels need the network
os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

# SmolLM2-135M: Llama, 30 layers, hidden 576, 9 heads (3 KV), MLP 1536, vocab 49152, tied.
SMOLLM2_135M = dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                    intermediate_size=1536, vocab_size=49152, max_position_embeddings=8192,
                    tie_word_embeddings=True, rope_theta=100000.0)
TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
            intermediate_size=64, vocab_size=512, max_position_embeddings=4096, tie_word_embeddings=True)
FULL = dict(batch=64, big_batch=256, prompt_tokens=1000, new_tokens=512, long_tokens=1536, grpo_steps=4,
            grpo_tasks=8, steps_per_generation=None, num_generations=8, completion_len=768, sft_steps=8,
            reward_copies=8, eval_tasks=None)
SMOKE = dict(batch=4, big_batch=8, prompt_tokens=200, new_tokens=8, long_tokens=12, grpo_steps=1, grpo_tasks=2,
             steps_per_generation=None, num_generations=2, completion_len=8, sft_steps=2, reward_copies=1,
             eval_tasks=2)


class Report:
    """The result file, rewritten after every section so a cut-short run keeps its figures.
    An existing file is updated, not replaced: `--only grpo` refreshes the GRPO figures of
    an earlier full run and keeps the others (each section records the command that ran it)."""

    def __init__(self, path: Path):
        self.path = path
        self.data = {"generate_tokens_per_s": None, "rollout_tokens_per_s": None, "reward_wait_fraction": None,
                     "sft_first_step_s": None, "details": {}}
        if path.exists():
            self.data.update(json.loads(path.read_text()))
        self.command = "python benchmarks/rl_loop.py " + " ".join(sys.argv[1:])
        self.device = None  # the machine of this run: sections kept from other runs keep theirs

    def detail(self, section: str, value) -> None:
        self.data["details"][section] = value
        self.data["details"].setdefault("commands", {})[section] = self.command
        self.data["details"].setdefault("devices", {})[section] = self.device
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        print(json.dumps({k: v for k, v in self.data.items() if k != "details"}), flush=True)


def build_model(root: Path, shape: dict, tasks) -> Path:
    """A random-init Llama of `shape` with the project's BPE tokenizer (trained on the task
    text; the model's vocabulary is `shape`'s, larger than the tokenizer's, so the logits
    cost what the real model's do)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from chorus.modeling import save_model_atomically, task_corpus, train_tokenizer

    tokenizer = train_tokenizer(task_corpus(tasks), min(shape["vocab_size"], 2048))
    config = LlamaConfig(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    out = root / "model"
    save_model_atomically(model.to(torch.bfloat16 if torch.cuda.is_available() else torch.float32), tokenizer, out)
    return out


def prompt_ids(tokenizer, tasks, length: int, count: int) -> list[list[int]]:
    """`count` prompts cycling over the tasks' rendered prompts, cut to their last `length`
    tokens (the generation prompt stays at the end)."""
    from chorus.prompts import build_prompt, render_prompt

    rendered = [tokenizer(render_prompt(tokenizer, build_prompt(t)), add_special_tokens=False)["input_ids"][-length:]
                for t in tasks]
    return [rendered[i % len(rendered)] for i in range(count)]


def left_padded(tokenizer, tasks, sizes: dict, batch: int):
    """`batch` prompts of ~`sizes["prompt_tokens"]` tokens (prompt_ids), left-padded tensors."""
    tokenizer.padding_side = "left"
    return tokenizer.pad({"input_ids": prompt_ids(tokenizer, tasks, sizes["prompt_tokens"], batch)},
                         return_tensors="pt")


def time_decoder(decoder, inputs, new: int, stops: list[int], pad: int) -> dict:
    """A StaticDecoder's second of two calls on `inputs` (the first includes start-up and
    graph capture), sampling at temperature 0.8, top-p 0.95: tokens/s and ms per step."""
    times = []
    for _ in range(2):
        sync()
        start = time.perf_counter()
        _, lengths = decoder.generate(inputs["input_ids"], inputs["attention_mask"], max_new_tokens=new,
                                      temperature=0.8, top_p=0.95, stop_ids=stops, pad_id=pad)
        sync()
        times.append(time.perf_counter() - start)
    count = int(lengths.sum())
    return {"batch": int(inputs["input_ids"].shape[0]), "prompt_tokens": int(inputs["input_ids"].shape[1]),
            "graph": decoder.use_graph, "new_tokens": count, "rows_at_cap": int((lengths == new).sum()),
            "first_call_s": times[0], "seconds": times[1], "tokens_per_s": count / times[1],
            "ms_per_step": 1000 * times[1] / new}


def release_gpu_memory() -> None:
    """Frees what earlier decoders held before the next case allocates its own: on an H100
    the cases after batch512 ran out of memory with 75.7 GB still allocated (a decoder's
    cache and graph pool can outlive it in reference cycles)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class SlotsOf:
    """A StaticDecoder decoding `slots` rows at a time: `refill` in one call (a slot takes
    the next row as its row ends), else in calls of `slots` rows one after another (each
    waits for its longest row: the evaluation sampler before refilling)."""

    def __init__(self, decoder, slots: int, refill: bool):
        self.decoder, self.slots, self.refill = decoder, slots, refill

    @property
    def use_graph(self) -> bool:
        return self.decoder.use_graph

    def generate(self, input_ids, attention_mask, **kwargs):
        import torch

        if self.refill:
            return self.decoder.generate(input_ids, attention_mask, slots=self.slots, **kwargs)
        calls = [self.decoder.generate(input_ids[first : first + self.slots],
                                       attention_mask[first : first + self.slots], **kwargs)
                 for first in range(0, len(input_ids), self.slots)]
        return None, torch.cat([lengths for _, lengths in calls])


def sync():
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def bench_generation(model_dir: Path, tasks, sizes: dict, device: str, deadline: float, report: Report) -> None:
    """Engine tokens/s of plain generate, the static decoder (CUDA graph) and continuous
    batching on the same prompts (EOS set to an id the random model practically never
    draws: every request decodes `new_tokens`), then the eval sampler end to end. Variants
    are skipped once the section's `deadline` has passed."""
    import torch
    from transformers import ContinuousBatchingConfig, GenerationConfig

    from chorus.generate import StaticDecoder, continuous_batching_kwargs, sample_completions
    from chorus.modeling import load_model_and_tokenizer
    from chorus.settings import Sampling

    model, tokenizer = load_model_and_tokenizer(model_dir, device)
    model.eval()
    new = sizes["new_tokens"]
    rare = model.config.vocab_size - 1
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    sampling = dict(do_sample=True, temperature=0.8, top_p=0.95, top_k=None)
    results: dict = {"device": device, "new_tokens": new}

    def plain(batch: int) -> dict:
        inputs = left_padded(tokenizer, tasks, sizes, batch).to(device)
        kwargs = dict(max_new_tokens=new, pad_token_id=pad, eos_token_id=rare, **sampling)
        with torch.no_grad():
            model.generate(**inputs, **{**kwargs, "max_new_tokens": 4})  # CUDA/cuBLAS start-up
            sync()
            start = time.perf_counter()
            out = model.generate(**inputs, **kwargs)
            sync()
        seconds = time.perf_counter() - start
        tokens = int(out.shape[0] * (out.shape[1] - inputs["input_ids"].shape[1]))
        return {"batch": batch, "prompt_tokens": int(inputs["input_ids"].shape[1]), "seconds": seconds,
                "new_tokens": tokens, "tokens_per_s": tokens / seconds, "ms_per_step": 1000 * seconds / new}

    def static(batch: int) -> dict:
        return time_decoder(StaticDecoder(model), left_padded(tokenizer, tasks, sizes, batch), new, [rare], pad)

    def continuous(batch: int) -> dict:
        ids = prompt_ids(tokenizer, tasks, sizes["prompt_tokens"], batch)
        config = GenerationConfig(max_new_tokens=new, pad_token_id=pad, eos_token_id=rare, **sampling)
        engine = continuous_batching_kwargs(device, max(map(len, ids)), new, batch)
        runs = []
        for _ in range(2):  # the first call sizes the cache and captures the CUDA graphs
            sync()
            start = time.perf_counter()
            out = model.generate_batch(ids, generation_config=config, progress_bar=False,
                                       continuous_batching_config=ContinuousBatchingConfig(seed=0, **engine))
            sync()
            runs.append((time.perf_counter() - start, sum(len(o.generated_tokens) for o in out.values())))
            if runs[0][0] > 60:  # slow: one call is figure enough
                break
        seconds, tokens = runs[-1]
        return {"batch": batch, "prompt_tokens": sum(map(len, ids)) / len(ids), "first_call_s": runs[0][0],
                "seconds": seconds, "new_tokens": tokens, "tokens_per_s": tokens / seconds}

    variants = (("generate", plain, sizes["batch"]), ("static", static, sizes["batch"]),
                ("continuous", continuous, sizes["batch"]), ("static_big_batch", static, sizes["big_batch"]),
                ("continuous_big_batch", continuous, sizes["big_batch"]))
    for name, run, batch in variants:
        if time.perf_counter() > deadline:
            results[name] = {"error": "skipped: out of the section's time budget"}
            continue
        try:
            results[name] = run(batch)
        except Exception as err:  # one failed variant must not lose the others
            results[name] = {"error": repr(err)[:800]}
        report.detail("generate", results)
    del model
    release_gpu_memory()
    # the workflow's eval sampler end to end (model load included), real EOS
    tasks = tasks[: sizes["eval_tasks"]] if sizes["eval_tasks"] else tasks
    k = max(1, sizes["batch"] // len(tasks))
    for sampler in ("static", "continuous"):
        if time.perf_counter() > deadline:
            results[f"eval_sampler_{sampler}"] = {"error": "skipped: out of the section's time budget"}
            continue
        try:
            with tempfile.TemporaryDirectory() as tmp:
                results[f"eval_sampler_{sampler}"] = sample_completions(
                    model_dir, tasks, k, Path(tmp) / "g.jsonl", Sampling(max_new_tokens=new, sampler=sampler),
                    device=device)
        except Exception as err:
            results[f"eval_sampler_{sampler}"] = {"error": repr(err)[:800]}
        report.detail("generate", results)
    fast = {n: results[n].get("tokens_per_s") for n, _, b in variants if n != "generate" and b >= sizes["batch"]}
    fast = {n: v for n, v in fast.items() if v}
    if fast:
        best = max(fast, key=fast.get)
        report.data["generate_tokens_per_s"] = fast[best]
        results["best"] = best
    report.detail("generate", results)


def load_decoder_class(path: Path):
    """StaticDecoder from another tree's chorus/generate.py (`git show REV:src/chorus/generate.py`),
    to compare decoders in one run on one machine."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("baseline_generate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StaticDecoder


def bench_decode(model_dir: Path, tasks, sizes: dict, device: str, deadline: float, report: Report,
                 baseline: Path | None = None, only_cases: list[str] | None = None) -> None:
    """The static decoder step by step, on ~1k-token prompts whose EOS never comes: tokens/s
    and ms per decode step at batch `batch` and `big_batch` with `new_tokens` new tokens,
    and at `big_batch` with `long_tokens` (the evaluation's cap), for this tree's decoder
    (one graph per step, attention over the filled cache prefix), the same over the whole
    cache (kv_block None), and with `baseline` an earlier tree's StaticDecoder; rows of
    uneven lengths (stragglers) with and without compaction, and twice `big_batch` of them
    through `big_batch` slots, refilled as rows end vs in two calls; where a step's time
    goes (profile_decode_step). `only_cases`: the
    cases whose names end so (e.g. stragglers); earlier figures of the others stay."""
    from chorus.generate import StaticDecoder
    from chorus.modeling import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(model_dir, device)
    model.eval()
    rare = model.config.vocab_size - 1
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    # compiled variants on GPU only: inductor on CPU is slow to build (tests/test_rl_speed.py covers it there)
    compiles = device.startswith("cuda")
    decoders = {"step_graph_prefix": lambda: StaticDecoder(model),
                "step_graph_whole_cache": lambda: StaticDecoder(model, kv_block=None),
                "step_graph_prefix_no_compaction": lambda: StaticDecoder(model, compact=False)}
    if compiles:
        decoders["step_graph_prefix_compiled"] = lambda: StaticDecoder(model, compile=True)
    if baseline is not None:
        decoders["baseline"] = lambda: load_decoder_class(baseline)(model)
    big = sizes["big_batch"]
    decoders[f"slots{big}_calls"] = lambda: SlotsOf(StaticDecoder(model), big, refill=False)
    decoders[f"slots{big}_refill"] = lambda: SlotsOf(StaticDecoder(model), big, refill=True)
    results: dict = {**(report.data["details"].get("decode") or {} if only_cases else {}), "device": device,
                     "prompt_tokens": sizes["prompt_tokens"], "baseline": str(baseline) if baseline else None}

    # stragglers: the top 1/400 of the vocabulary stops a row (random weights draw nearly
    # uniformly): lengths roughly geometric, mean ~400, capped at GRPO's completion length
    vocab = model.config.vocab_size
    stragglers = list(range(vocab - vocab // 400, vocab))
    cap = sizes["completion_len"]
    full_rows = ("step_graph_prefix", "step_graph_prefix_compiled", "step_graph_whole_cache", "baseline")
    cases = [(f"batch{sizes['batch']}", sizes["batch"], sizes["new_tokens"], [rare], full_rows),
             (f"batch{big}", big, sizes["new_tokens"], [rare], full_rows),
             (f"batch{big}_long", big, sizes["long_tokens"], [rare], full_rows),
             # a GRPO rollout batch can be larger than an evaluation batch (rl.steps_per_generation)
             (f"batch{2 * big}", 2 * big, sizes["new_tokens"], [rare], ("step_graph_prefix",)),
             (f"batch{big}_stragglers", big, cap, stragglers,
              ("step_graph_prefix", "step_graph_prefix_no_compaction", "baseline")),
             # twice the rows through `big` slots, refilled as rows end vs two calls, vs all at once
             (f"batch{2 * big}_stragglers", 2 * big, cap, stragglers,
              (f"slots{big}_calls", f"slots{big}_refill", "step_graph_prefix"))]
    # the profile first, before this process captures any graph (after the cases, it has
    # failed on the GPU with the CUDA generator in capture mode)
    if not only_cases or "profile" in only_cases:
        for compiled in (False, True) if compiles else (False,):
            key = "profile_compiled" if compiled else "profile"
            try:
                results[key] = profile_decode_step(model, tokenizer, tasks, sizes, rare, pad, compiled=compiled)
            except Exception as err:
                results[key] = {"error": repr(err)[:800]}
            report.detail("decode", results)
    for case, batch, new, stops, names in cases:
        if only_cases and not any(case.endswith(suffix) for suffix in only_cases):
            continue
        for name in names:
            key = f"{case}/{name}"
            if name not in decoders:
                continue
            if time.perf_counter() > deadline:
                results[key] = {"error": "skipped: out of the section's time budget"}
                continue
            try:
                results[key] = time_decoder(decoders[name](), left_padded(tokenizer, tasks, sizes, batch), new,
                                            stops, pad)
            except Exception as err:  # one failed variant must not lose the others
                results[key] = {"error": repr(err)[:800]}
            release_gpu_memory()
            report.detail("decode", results)
        reference = results.get(f"{case}/baseline", {}).get("tokens_per_s")
        for name in names:
            if reference and (results.get(f"{case}/{name}") or {}).get("tokens_per_s"):
                results[f"{case}/{name}"]["speedup_vs_baseline"] = results[f"{case}/{name}"]["tokens_per_s"] / reference
    fast = [(r["tokens_per_s"], key) for key, r in results.items()  # the goal's shape: 512 new tokens
            if isinstance(r, dict) and r.get("tokens_per_s") and "baseline" not in key
            and key.split("/")[0] in (f"batch{sizes['batch']}", f"batch{big}")]
    if fast:
        report.data["generate_tokens_per_s"], results["best"] = max(fast)
    report.detail("decode", results)


def profile_decode_step(model, tokenizer, tasks, sizes: dict, rare: int, pad: int, steps: int = 8,
                        compiled: bool = False) -> dict:
    """Where a decode step's time goes, at `big_batch` with ~1k-token prompts: torch.profiler
    self times and counts by kernel (GPU) or operator (CPU) of steps without graphs (a graph
    replays the same kernels), the step compiled or not, `steps` + 1 new tokens minus 1 new
    token, so the prefill cancels out; the top entries' milliseconds per step and share."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from chorus.generate import StaticDecoder

    on_gpu = next(model.parameters()).is_cuda
    inputs = left_padded(tokenizer, tasks, sizes, sizes["big_batch"])
    decoder = StaticDecoder(model, use_graph=False, compile=compiled)

    def self_ms(new_tokens: int) -> dict[str, float]:
        run = dict(max_new_tokens=new_tokens, temperature=0.8, top_p=0.95, stop_ids=[rare], pad_id=pad)
        decoder.generate(inputs["input_ids"], inputs["attention_mask"], **run)  # warm
        with profile(activities=[ProfilerActivity.CUDA if on_gpu else ProfilerActivity.CPU]) as prof:
            decoder.generate(inputs["input_ids"], inputs["attention_mask"], **run)
            if on_gpu:
                torch.cuda.synchronize()
        return {e.key: ((e.self_device_time_total if on_gpu else e.self_cpu_time_total) / 1000, e.count)
                for e in prof.key_averages()}

    prefill, whole = self_ms(1), self_ms(steps + 1)
    per_step = {}
    for name, (ms, count) in whole.items():
        prefill_ms, prefill_count = prefill.get(name, (0.0, 0))
        if ms > prefill_ms:
            per_step[name] = ((ms - prefill_ms) / steps, (count - prefill_count) / steps)
    total = sum(ms for ms, _ in per_step.values())
    top = sorted(per_step.items(), key=lambda item: -item[1][0])[:15]
    return {"batch": sizes["big_batch"], "steps": steps, "compiled": decoder.compiled,
            "clock": "gpu kernels" if on_gpu else "cpu operators", "ms_per_step": total,
            "calls_per_step": sum(count for _, count in per_step.values()),
            "top": [{"name": name[:120], "ms": ms, "calls": count, "share": ms / total}
                    for name, (ms, count) in top]}


def bench_rewards(tasks, copies: int, workers: int, limits, report: Report) -> None:
    """One reward call on runnable completions (each task's reference, repeated) with one
    hanging candidate: with per-task timeouts the straggler costs its task's limit."""
    from chorus.harness import ensure_build
    from chorus.harness.timeouts import TimeoutPolicy, task_limits
    from chorus.reward import CoverageReward

    hang = "```python\nimport cocotb\n\n@cocotb.test()\nasync def spin(dut):\n    while True:\n        pass\n```"
    references = ["```python\n" + t.reference_stimulus.read_text() + "```" for t in tasks]
    completions = references * copies + [hang]
    task_ids = [t.id for t in tasks] * copies + [tasks[0].id]
    reward = CoverageReward(tasks, "dense", workers, limits, TimeoutPolicy())
    for build in reward.prebuilds:  # builds and reference timings: not part of the call
        build.result()
    start, own = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    rewards = reward(completions, task_id=task_ids)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    # CPU the scoring costs the calling process itself (threads launching sandboxes and
    # reading their results), the part that competes with a decoder in that process
    scorer_cpu = after.ru_utime - own.ru_utime + after.ru_stime - own.ru_stime
    report.detail("rewards_with_straggler", {
        "completions": len(completions), "workers": workers, "seconds": seconds,
        "simulations_per_s": len(completions) / seconds, "mean_reward": sum(rewards) / len(rewards),
        "scorer_process_cpu_s": scorer_cpu,
        "scorer_process_cpu_ms_per_simulation": 1000 * scorer_cpu / len(completions),
        "statuses": reward.calls[-1]["statuses"], "ceiling_s": limits.timeout_s,
        "task_limits_s": {t.id: task_limits(t, ensure_build(t), limits, TimeoutPolicy()).timeout_s for t in tasks},
    })


def bench_grpo(model_dir: Path, tasks, sizes: dict, workers: int, limits, device: str, root: Path,
               backends: list[str], deadline: float, report: Report, late: bool = False,
               compile_rollouts: bool = False, slots: int | None = None, rounds: tuple[int, ...] = (1,)) -> None:
    """One GRPO expert per rollout backend, end to end, with the step breakdown; `late`:
    each backend again with the rewards simulated only after the whole batch;
    `compile_rollouts`: the static decoder's steps compiled (train_expert rollout_compile);
    `slots`: its rows decoded at once (rollout_slots); `rounds`: each backend once per
    number of coverage-closure rounds per episode (rl.rounds), the cost of the extra rounds
    against the one-round run of the same backend (`rounds_cost`)."""
    from concurrent.futures import ThreadPoolExecutor

    from chorus.harness import prebuild
    from chorus.harness.timeouts import TimeoutPolicy
    from chorus.rl import train_expert
    from chorus.settings import GRPOExpert

    # as in the workflow, where the preflight rule has built every design: the designs are
    # compiled and their references timed before the clock runs
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda task: prebuild(task, None, limits, TimeoutPolicy()), tasks))
    per_step = sizes["num_generations"] * len(tasks)  # completions per optimizer step
    accum = sizes.get("grad_accum") or 1  # in micro-batches of per_step / accum
    per_generation = sizes.get("steps_per_generation") or accum  # micro-batches per rollout batch
    # runs at other batch sizes, and of other settings at this one, stay in the file
    section = (f"grpo_batch{per_step // accum}" + (f"a{accum}" if accum > 1 else "")
               + (f"x{per_generation}" if per_generation > 1 else ""))
    runs = dict(report.data["details"].get(section) or {})
    # "<backend>": rewards simulated as rollouts are decoded; "<backend>_late": after the batch;
    # settings other than the defaults name themselves (e.g. static_compiled_slots256_nice10)
    suffix = (("_compiled" if compile_rollouts else "") + (f"_slots{slots}" if slots else "")
              + (f"_nice{limits.nice}" if limits.nice else ""))
    variants = ([(backend + suffix + (f"_rounds{n}" if n > 1 else ""), backend, True, n)
                 for backend in backends for n in rounds]
                + [(f"{backend}{suffix}_late", backend, False, 1) for backend in backends if late])
    for name, backend, early, episode_rounds in variants:
        if time.perf_counter() > deadline:
            runs[name] = {"error": "skipped: out of the section's time budget"}
            continue
        try:
            expert = GRPOExpert(
                steps=sizes["grpo_steps"], num_generations=sizes["num_generations"], batch_size=per_step // accum,
                grad_accum=sizes.get("grad_accum"),
                max_completion_length=sizes["completion_len"], rollout_backend=backend, save_steps=10_000,
                early_rewards=early, steps_per_generation=sizes.get("steps_per_generation"),
                rollout_compile=compile_rollouts, rollout_slots=slots, rounds=episode_rounds,
            )
            metrics = train_expert(
                model_dir, tasks, root / f"expert-{name}", expert, sim_workers=workers, sim_limits=limits,
                sim_timeouts=TimeoutPolicy(), device=device, use_cpu=device == "cpu",
            )
            runs[name] = {"steps": metrics["steps"], "runtime_s": metrics["runtime_s"],
                             "rollout_backend": metrics["rollout_backend"], **metrics["breakdown"],
                             "statuses": [c["statuses"] for c in metrics["reward_calls"]],
                             "reward_wait_per_call_s": [round(c["wall_s"], 3) for c in metrics["reward_calls"]],
                             "completions_per_step": per_step, "grad_accum": accum,
                             "rollout_batch": per_step // accum * per_generation,
                             "sim_workers": workers, "sim_nice": limits.nice,
                             "rollout_compile": metrics["rollout_compile"], "rollout_slots": slots,
                             "rounds": episode_rounds, "round_episodes": metrics["round_episodes"],
                             "command": report.command, "device": report.device}
        except Exception as err:
            runs[name] = {"error": repr(err)[:1500]}
        report.detail(section, runs)
    report.detail(section, runs)
    if len(rounds) > 1:
        report.detail(f"{section}_rounds_cost", rounds_cost(runs, [b + suffix for b in backends], rounds))
    # the headline: the fastest rollouts of every GRPO run in the file (any batch size) as
    # the workflow runs them (rewards started early), in steady state where the run had
    # more than one rollout batch (the first holds the decoder's one-off compile)
    def rate(r: dict) -> float:
        return r.get("rollout_tokens_per_s_after_first") or r["rollout_tokens_per_s"]

    sections = {name: runs for name, runs in report.data["details"].items()
                if name.startswith("grpo") and isinstance(runs, dict)}
    done = [(f"{name}/{backend}", r) for name, section_runs in sections.items()
            for backend, r in section_runs.items()
            if isinstance(r, dict) and r.get("rollout_tokens_per_s") and not backend.endswith("_late")
            and (r.get("rounds") or 1) == 1]  # multi-round runs are measured against these, not among them
    if done:
        best, figures = max(done, key=lambda item: rate(item[1]))
        report.data["rollout_tokens_per_s"] = rate(figures)
        report.data["reward_wait_fraction"] = figures["reward_wait_fraction"]
        report.data["details"]["grpo_best"] = best
        report.save()


def rounds_cost(runs: dict, backends: list[str], rounds: tuple[int, ...]) -> dict:
    """Per backend and number of rounds N > 1, measured in the same run against the
    one-round expert: wall time, rollout generation time and rollout tokens (every round's
    generated answers) as ratios, and the extra seconds per extra round per
    rollout batch."""
    cost = {}
    for backend in backends:
        one = runs.get(backend) or {}
        for n in (n for n in rounds if n > 1):
            many = runs.get(f"{backend}_rounds{n}") or {}
            if not one.get("runtime_s") or not many.get("runtime_s"):
                continue
            batches = max(1, len(one["rollout_batches"]))  # the same rollout batches, one generation each
            cost[f"{backend}_rounds{n}"] = {
                "runtime_ratio": many["runtime_s"] / one["runtime_s"],
                "generation_ratio": many["generation_s"] / one["generation_s"],
                "rollout_tokens_ratio": many["rollout_tokens"] / one["rollout_tokens"],
                "extra_s_per_round_per_rollout_batch": (many["runtime_s"] - one["runtime_s"]) / (n - 1) / batches,
                "reward_wait_fraction": [one["reward_wait_fraction"], many["reward_wait_fraction"]],
            }
    return cost


def sft_job(args) -> None:
    """--sft-job: one train_stage in this (fresh) process; its metrics to --out."""
    from chorus.settings import SFTStage
    from chorus.sft import train_stage

    stage = SFTStage(max_steps=args.steps, batch_size=4, max_length=2048, lr=1e-5, save_steps=10_000,
                     attention="flex_attention" if args.kernels == "compiled" else "sdpa",
                     liger_kernel="auto" if args.kernels == "compiled" else False, compile_min_flops=None)
    metrics = train_stage(args.model, args.data, Path(args.work) / f"sft-{args.kernels}", stage, resume=False,
                          device=args.device, use_cpu=args.device == "cpu")
    keep = ("steps", "runtime_s", "first_step_s", "tokens", "tokens_per_s", "steady_tokens_per_s",
            "attn_implementation", "use_liger_kernel", "padding_free")
    Path(args.out).write_text(json.dumps({k: metrics.get(k) for k in keep}))


def sft_data(tasks, root: Path) -> Path:
    from chorus.data import build_stage_dataset

    data = root / "sft.jsonl"
    rows = build_stage_dataset(tasks, {"reference": ["easy", "medium", "hard"], "format": True}, data)
    with data.open("w") as handle:
        for _ in range(4):
            handle.writelines(json.dumps(r) + "\n" for r in rows)
    return data


class SftRun:
    """One SFT job in a fresh process (its own compile state), sharing `cache` as
    TORCHINDUCTOR_CACHE_DIR; optionally pinned to `cpus` so that a background compile leaves
    the other cores to the simulations."""

    def __init__(self, model_dir: Path, data: Path, root: Path, kernels: str, steps: int, device: str, cache: Path,
                 cpus: list[int] | None = None):
        self.out = root / f"sft-{kernels}-{time.monotonic_ns()}.json"
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO / "src")}
        if cpus:
            env["TORCHINDUCTOR_COMPILE_THREADS"] = str(len(cpus))
        cmd = [sys.executable, __file__, "--sft-job", "--model", str(model_dir), "--data", str(data),
               "--work", str(root), "--kernels", kernels, "--steps", str(steps), "--device", device,
               "--out", str(self.out)]
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)

    def result(self, timeout_s: float) -> dict:
        try:
            _, err = self.proc.communicate(timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
            waited = time.perf_counter() - self.start
            return {"error": f"did not finish within {waited:.0f} s (first step >= that, compile included)"}
        if self.proc.returncode != 0:
            return {"error": (err or "")[-1500:]}
        return {**json.loads(self.out.read_text()), "job_s": time.perf_counter() - self.start}


def bench_sft(model_dir: Path, data: Path, sizes: dict, device: str, root: Path, deadline: float,
              background: SftRun | None, report: Report) -> None:
    """First step (compile included) and steady tokens/s: sdpa, the compiled kernels with an
    empty compile cache (`background`: started with the benchmark, on 4 pinned cores,
    while the other sections ran), then with the cache warm; and the break-even job size."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cache = root / "inductor"
    results: dict = {"steps": sizes["sft_steps"]}
    results["sdpa"] = SftRun(model_dir, data, root, "sdpa", sizes["sft_steps"], device, cache).result(
        deadline - time.perf_counter())
    report.data["sft_first_step_s"] = results["sdpa"].get("first_step_s")
    report.detail("sft", results)
    if background is None:
        results["compiled"] = {"error": "skipped: flex_attention needs a GPU (no CPU backward)"}
    else:
        results["compiled"] = {**background.result(deadline - time.perf_counter()),
                               "note": "cold compile cache, 4 pinned cores, concurrent with the other sections"}
        report.detail("sft", results)
        left = deadline - time.perf_counter()
        results["compiled_warm_cache"] = (
            SftRun(model_dir, data, root, "compiled", sizes["sft_steps"], device, cache).result(left)
            if left > 45 and "error" not in results["compiled"] else {"error": f"skipped ({left:.0f} s left)"})
    report.detail("sft", results)
    sdpa = results["sdpa"]
    fast = next((results[n] for n in ("compiled_warm_cache", "compiled")
                 if (results.get(n) or {}).get("steady_tokens_per_s")), None)
    if sdpa.get("steady_tokens_per_s") and fast:
        with torch.device("meta"):
            params = sum(p.numel() for p in AutoModelForCausalLM.from_config(
                AutoConfig.from_pretrained(model_dir)).parameters())
        saved_per_token = 1 / sdpa["steady_tokens_per_s"] - 1 / fast["steady_tokens_per_s"]
        for name in ("compiled", "compiled_warm_cache"):
            extra = (results.get(name) or {}).get("first_step_s")
            if extra is None:
                continue
            cost = extra - sdpa["first_step_s"]
            results[f"breakeven_{name}"] = (
                {"tokens": cost / saved_per_token, "train_flops": 6 * params * cost / saved_per_token}
                if saved_per_token > 0 else {"tokens": None, "note": "the compiled kernels are not faster here"})
    report.detail("sft", results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="HF model folder (default: random SmolLM2-135M shape)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "rl_loop_h200.json")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, runs on CPU")
    parser.add_argument("--budget-s", type=float, default=480, help="stop starting work after this long")
    parser.add_argument("--guard", action=argparse.BooleanOptionalAction, default=True,
                        help="the sandbox's audit-hook guard, on as in scoring (--no-guard to compare)")
    parser.add_argument("--only", nargs="*", default=["generate", "rewards", "grpo", "sft"],
                        help="sections: generate rewards grpo sft, and decode (the static decoder step by step)")
    parser.add_argument("--decode-cases", nargs="*", default=None,
                        help="decode section: only the cases ending so (batch64 batch256 long batch512 stragglers),\n"
                             "and the kernel profile with `profile`")
    parser.add_argument("--baseline-decoder", type=Path,
                        help="decode section: also time StaticDecoder from this file (another tree's generate.py)")
    parser.add_argument("--grpo-backends", nargs="*", default=None,
                        help="rollout backends to run GRPO with (auto, generate, continuous, static, vllm); "
                             "default static and continuous (--smoke: static)")
    parser.add_argument("--grpo-tasks", type=int, help="train tasks per GRPO step (default 8; --smoke 2)")
    parser.add_argument("--grpo-generations", type=int, help="completions per task and step (default 8)")
    parser.add_argument("--grpo-steps", type=int, help="GRPO steps (default 4)")
    parser.add_argument("--grpo-steps-per-generation", type=int, default=None,
                        help="optimizer steps per rollout batch (rl.steps_per_generation; default one)")
    parser.add_argument("--grpo-completion-len", type=int, help="rollout token cap (default 768)")
    parser.add_argument("--grpo-grad-accum", type=int,
                        help="micro-batches per optimizer step (rl.grad_accum; default one)")
    parser.add_argument("--sim-workers", type=int, default=None,
                        help="simulation sandboxes (default: the cores less one, less 4 more while SFT compiles)")
    parser.add_argument("--sim-nice", type=int, default=0,
                        help="niceness of the simulations (config simulation.nice; the GRPO run's name gets _nice<N>)")
    parser.add_argument("--grpo-compile", action="store_true",
                        help="GRPO's static rollouts with the decode steps compiled (the run's name gets _compiled)")
    parser.add_argument("--grpo-slots", type=int, default=None,
                        help="GRPO's static rollouts decode this many rows at a time, refilling slots "
                             "(the run's name gets _slots<N>)")
    parser.add_argument("--grpo-rounds", type=int, nargs="+", default=[1],
                        help="coverage-closure rounds per episode: one expert per value (e.g. 1 2: the cost of a round)")
    parser.add_argument("--grpo-late", action="store_true",
                        help="also run each backend with rewards simulated after the whole batch (<backend>_late)")
    # internal: one SFT job in a fresh process
    parser.add_argument("--sft-job", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--kernels", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--device", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sft_job:
        return sft_job(args)
    if args.grpo_backends is None:
        args.grpo_backends = ["static"] if args.smoke else ["static", "continuous"]

    import torch

    from chorus.harness import SandboxLimits
    from chorus.tasks import load_tasks

    start = time.perf_counter()
    deadline = start + args.budget_s
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    sizes = dict(SMOKE if args.smoke else FULL)
    for key, value in (("grpo_tasks", args.grpo_tasks), ("num_generations", args.grpo_generations),
                       ("grpo_steps", args.grpo_steps), ("steps_per_generation", args.grpo_steps_per_generation),
                       ("completion_len", args.grpo_completion_len), ("grad_accum", args.grpo_grad_accum)):
        sizes[key] = value if value is not None else sizes.get(key)
    report = Report(args.out)
    root = Path(tempfile.mkdtemp(prefix="chorus-rl-loop-"))
    tasks = load_tasks(splits="train")
    try:
        from chorus.harness.sandbox import grant_traversal

        grant_traversal()  # as `make setup` does: the sandbox user must reach this Python
    except Exception as err:
        print(f"grant_traversal: {err!r}", flush=True)
    model_dir = args.model or build_model(root, TINY if args.smoke else SMOLLM2_135M, tasks)
    import transformers
    import trl

    model_name = str(args.model) if args.model else "random tiny" if args.smoke else "random SmolLM2-135M shape"
    report.device = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    report.detail("env", {"device": report.device,
                          "torch": torch.__version__, "transformers": transformers.__version__,
                          "trl": trl.__version__, "model": model_name, "cpus": os.cpu_count(),
                          "smoke": args.smoke, "sizes": sizes})
    cpus = sorted(os.sched_getaffinity(0))
    # a background compile (SFT, GPU only) gets the last 4 cores, the simulations the rest
    compile_cpus = cpus[-4:] if device == "cuda" and len(cpus) >= 8 and "sft" in args.only else None
    workers = args.sim_workers or max(2, len(cpus) - (5 if compile_cpus else 1))
    data = sft_data(tasks, root)
    background = (SftRun(model_dir, data, root, "compiled", sizes["sft_steps"], device, root / "inductor",
                         cpus=compile_cpus) if device == "cuda" and "sft" in args.only else None)
    limits = SandboxLimits(timeout_s=10 if args.smoke else 60, guard=args.guard, nice=args.sim_nice)  # the ceiling
    easy_first = sorted(tasks, key=lambda t: ("easy", "medium", "hard").index(t.difficulty))
    grpo_tasks = easy_first[: sizes["grpo_tasks"]]
    sections = {
        "decode": lambda: bench_decode(model_dir, tasks, sizes, device, start + 0.5 * args.budget_s, report,
                                       args.baseline_decoder, args.decode_cases),
        "generate": lambda: bench_generation(model_dir, tasks, sizes, device, start + 0.35 * args.budget_s, report),
        "rewards": lambda: bench_rewards(grpo_tasks, sizes["reward_copies"], workers, limits, report),
        "grpo": lambda: bench_grpo(model_dir, grpo_tasks, sizes, workers, limits, device, root, args.grpo_backends,
                                   start + 0.7 * args.budget_s, report, late=args.grpo_late,
                                   compile_rollouts=args.grpo_compile, slots=args.grpo_slots,
                                   rounds=tuple(args.grpo_rounds)),
        "sft": lambda: bench_sft(model_dir, data, sizes, device, root, deadline, background, report),
    }
    for name, section in sections.items():
        if name not in args.only:
            continue
        if time.perf_counter() > deadline:
            report.detail(name, {"error": "skipped: out of the time budget"})
            continue
        began = time.perf_counter()
        try:
            section()
        except Exception as err:  # one failed section must not lose the others, nor its own figures so far
            report.detail(f"{name}_error", repr(err)[:1500])
        report.data["details"].setdefault("section_s", {})[name] = time.perf_counter() - began
        report.save()
    if background is not None and background.proc.poll() is None:  # sft skipped: stop its compile
        background.proc.kill()
    report.data["details"]["total_s"] = time.perf_counter() - start
    report.save()


if __name__ == "__main__":
    main()
