"""GPU throughput of the pipeline's training and sampling paths (run on an H200).

Builds a random-init model of a real shape (default: Qwen2.5-1.5B-like, built from a
config: no download), then measures with the project's own code paths:
  - SFT tokens/s (non-padding tokens) and model FLOPs utilisation (MFU) with TRL's
    SFTTrainer, bf16: sdpa with padded packed rows; flex_attention padding-free; Liger's
    fused kernels; DeepSpeed ZeRO-2 in-process,
  - the workflow's launcher path (chorus.launch -> torchrun -> chorus.sft.train_stage,
    the sft rule's code): flex_attention + Liger alone, with DeepSpeed ZeRO-2 and ZeRO-3,
    and sdpa with ZeRO-2; `job_s` shows the compile cost (the first flex launch compiles,
    later ones reuse the compile cache),
  - rollout generation tokens/s with transformers `generate`,
  - one GRPO run with the real coverage reward: the fraction of wall time the trainer
    waits on simulations.
Prints one JSON object per measurement and a summary table.

  python benchmarks/gpu_throughput.py --shape 1.5b --out /tmp/gpu.json [--only sft sft_liger_flex]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
# the workflow's `compile_cache` (config/config.yaml): later launches reuse the compiled kernels
COMPILE_CACHE = str(REPO / yaml.safe_load((REPO / "config" / "config.yaml").read_text())["compile_cache"])
H200_BF16_PEAK = 790e12  # dense bf16 FLOP/s measured on this machine kind (device KINDS.md)


def emit(record: dict, sink: list) -> None:
    sink.append(record)
    print(json.dumps(record), flush=True)


def training_flops_per_token(model, seq_len: int) -> float:
    """6N for the dense weights plus the attention score/value products (12 * L * d * s)."""
    config = model.config
    params = sum(p.numel() for p in model.parameters())
    attention = 12 * config.num_hidden_layers * config.hidden_size * seq_len
    return 6 * params + attention


def build(shape: str, root: Path):
    from chorus.modeling import build_model_from_shape, build_tiny_model, task_corpus
    from chorus.tasks import load_tasks

    tasks = load_tasks(splits="train")
    tokenizer_dir = build_tiny_model(root / "tok", task_corpus(tasks), hidden_size=32, num_layers=1,
                                     num_heads=2, vocab_size=2048, max_position_embeddings=2048)
    model_dir = build_model_from_shape(root / "model", shape, tokenizer_dir)
    return tasks, model_dir


def packed_dataset(tasks, path: Path, repeats: int) -> Path:
    from chorus.data import build_stage_dataset

    rows = build_stage_dataset(tasks, {"reference": ["easy", "medium", "hard"], "format": True}, path)
    with path.open("w") as handle:
        for _ in range(repeats):
            for row in rows:
                handle.write(json.dumps(row) + "\n")
    return path


def bench_sft(model_dir, data, out, label, sink, *, batch, max_steps, deepspeed=None, seq_len=2048,
              attn="sdpa", padding_free=False, **extra):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer
    from datasets import load_dataset

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation=attn)
    dataset = load_dataset("json", data_files=str(data), split="train").select_columns(["prompt", "completion"])
    args = SFTConfig(
        output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=batch, learning_rate=1e-5,
        bf16=True, max_length=seq_len, packing=True, padding_free=padding_free, logging_steps=1, save_strategy="no",
        report_to="none", deepspeed=deepspeed, gradient_checkpointing=False, dataloader_num_workers=2,
        completion_only_loss=False, include_num_input_tokens_seen="non_padding", **extra,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    warm = 3
    times = []
    seen = []  # non-padding input tokens seen after each step

    class Timer(__import__("transformers").TrainerCallback):
        def on_step_begin(self, *a, **k):
            torch.cuda.synchronize()
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **k):
            torch.cuda.synchronize()
            times.append(time.perf_counter() - self.t)
            seen.append(state.num_input_tokens_seen)

    trainer.add_callback(Timer())
    torch.cuda.reset_peak_memory_stats()
    trainer.train()
    step_s = sum(times[warm:]) / len(times[warm:])
    # real (non-padding) tokens of the timed steps: padding is not useful work
    tps = (seen[-1] - seen[warm - 1]) / sum(times[warm:])
    flops = training_flops_per_token(trainer.model, seq_len) * tps
    dense_flops = 6 * sum(p.numel() for p in trainer.model.parameters()) * tps
    emit({"bench": "sft", "label": label, "attn": attn, "padding_free": padding_free,
          "params": sum(p.numel() for p in trainer.model.parameters()),
          "batch": batch, "seq_len": seq_len, "step_s": step_s, "tokens_per_s": tps,
          "tflops": flops / 1e12, "mfu": flops / H200_BF16_PEAK, "mfu_6n": dense_flops / H200_BF16_PEAK,
          "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30}, sink)
    del trainer, model
    torch.cuda.empty_cache()


def bench_generate(model_dir, tasks, sink, *, batch, new_tokens, cache="dynamic"):
    """Sampling tokens/s; `cache="static"`: a preallocated KV cache, with which
    transformers compiles the decoding step (the first call pays the compilation)."""
    from chorus.modeling import load_model_and_tokenizer
    from chorus.prompts import build_prompt

    model, tokenizer = load_model_and_tokenizer(model_dir, "cuda")
    tokenizer.padding_side = "left"
    prompts = [tokenizer.apply_chat_template(build_prompt(t), tokenize=False, add_generation_prompt=True)
               for t in (tasks * batch)[:batch]]
    inputs = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to("cuda")
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True, temperature=1.0,
                  pad_token_id=tokenizer.pad_token_id)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    warm_start = time.perf_counter()
    model.generate(**inputs, **kwargs)  # the same shapes: any compilation happens here
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - warm_start
    start = time.perf_counter()
    model.generate(**inputs, **kwargs)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    emit({"bench": "generate", "cache": cache, "batch": batch, "prompt_tokens": int(inputs["input_ids"].shape[1]),
          "new_tokens": new_tokens, "first_call_s": warm_s, "seconds": elapsed,
          "tokens_per_s": batch * new_tokens / elapsed}, sink)
    del model
    torch.cuda.empty_cache()


def bench_grpo(model_dir, tasks, out, sink, *, steps, num_generations, completion_len, workers):
    from chorus.rl import train_expert
    from chorus.settings import GRPOExpert

    expert = GRPOExpert(steps=steps, num_generations=num_generations, batch_size=num_generations * 4,
                        max_completion_length=completion_len)
    metrics = train_expert(model_dir, tasks, out, expert, sim_workers=workers, device="cuda")
    calls = metrics["reward_calls"]
    emit({"bench": "grpo", "steps": metrics["steps"], "runtime_s": metrics["runtime_s"],
          "reward_wall_s": metrics["reward_wall_s"], "gpu_idle_fraction_waiting_on_rewards":
          metrics["reward_time_fraction"], "completions_scored": sum(c["n"] for c in calls),
          "statuses": calls[-1]["statuses"]}, sink)


def bench_launch(model_dir, data, out, label, sink, *, deepspeed, max_steps, batch, attn="sdpa", liger=False):
    """The workflow's path: chorus.launch starts train_stage under torch.distributed.run
    with one rank per visible GPU and the DeepSpeed config, as the sft rule does. MFU from
    the steady rate (after the warm-up steps) over real tokens."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from chorus.launch import launch_training

    start = time.perf_counter()
    launch_training("chorus.sft:train_stage",
                    dict(model_in=str(model_dir), dataset_jsonl=str(data), out_dir=str(out),
                         stage={"max_steps": max_steps, "batch_size": batch, "max_length": 2048, "lr": 1e-5,
                                "save_steps": 10_000, "attention": attn, "liger_kernel": liger}),
                    {"device": "cuda", "deepspeed": deepspeed, "processes": "auto", "compile_cache": COMPILE_CACHE})
    metrics = json.loads((out / "train_metrics.json").read_text())
    with torch.device("meta"):  # the shape's FLOPs, without weights
        shape_model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    tps = metrics["steady_tokens_per_s"]
    flops = training_flops_per_token(shape_model, 2048) * tps
    dense_flops = 6 * sum(p.numel() for p in shape_model.parameters()) * tps
    emit({"bench": "launch", "label": label, "world_size": metrics["world_size"], "deepspeed": deepspeed,
          "attn": attn, "liger": liger, "steps": metrics["steps"], "tokens_per_s_whole_run": metrics["tokens_per_s"],
          "tokens_per_s": tps, "tflops": flops / 1e12, "mfu": flops / H200_BF16_PEAK,
          "mfu_6n": dense_flops / H200_BF16_PEAK, "job_s": time.perf_counter() - start,
          "last_loss": metrics["last_loss"]}, sink)


def main() -> None:
    from chorus.modeling import SHAPES

    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="1.5b", choices=sorted(SHAPES))
    parser.add_argument("--out", type=Path, default=Path("gpu_bench.json"))
    parser.add_argument("--sft-steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--skip", nargs="*", default=[])
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sink: list = []
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    root = Path(tempfile.mkdtemp(prefix="chorus-gpu-"))
    tasks, model_dir = build(args.shape, root)
    data = packed_dataset(tasks, root / "sft.jsonl", repeats=40)
    emit({"bench": "env", "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
          "shape": args.shape}, sink)
    ds_dir = REPO / "config" / "deepspeed"
    ds = str(ds_dir / "zero2.json")
    benches = {
        "sft": lambda: bench_sft(model_dir, data, root / "sft", "bf16", sink, batch=args.batch,
                                 max_steps=args.sft_steps),
        "sft_fused_compiled": lambda: bench_sft(
            model_dir, data, root / "sft_fc", "bf16+fused-adamw+torch.compile", sink, batch=args.batch,
            max_steps=args.sft_steps, optim="adamw_torch_fused", torch_compile=True),
        "sft_flex": lambda: bench_sft(model_dir, data, root / "sft_flex", "bf16+flex+padding-free", sink,
                                      batch=args.batch, max_steps=args.sft_steps, attn="flex_attention",
                                      padding_free=True),
        "sft_liger": lambda: bench_sft(model_dir, data, root / "sft_liger", "bf16+liger", sink, batch=args.batch,
                                       max_steps=args.sft_steps, use_liger_kernel=True),
        "sft_liger_flex": lambda: bench_sft(model_dir, data, root / "sft_lf", "bf16+liger+flex+padding-free", sink,
                                            batch=args.batch, max_steps=args.sft_steps, attn="flex_attention",
                                            padding_free=True, use_liger_kernel=True),
        "launch_fast": lambda: bench_launch(model_dir, data, root / "launch_fast", "launcher+flex+liger", sink,
                                            deepspeed=None, max_steps=args.sft_steps, batch=args.batch,
                                            attn="flex_attention", liger=True),
        "launch_zero2": lambda: bench_launch(model_dir, data, root / "launch_z2", "launcher+zero2+flex+liger", sink,
                                             deepspeed=ds, max_steps=args.sft_steps, batch=args.batch,
                                             attn="flex_attention", liger=True),
        "launch_zero3": lambda: bench_launch(model_dir, data, root / "launch_z3", "launcher+zero3+flex+liger", sink,
                                             deepspeed=str(ds_dir / "zero3.json"), max_steps=args.sft_steps,
                                             batch=args.batch, attn="flex_attention", liger=True),
        "launch_zero2_sdpa": lambda: bench_launch(model_dir, data, root / "launch_z2s", "launcher+zero2+sdpa", sink,
                                                  deepspeed=ds, max_steps=args.sft_steps, batch=args.batch),
        "generate": lambda: bench_generate(model_dir, tasks, sink, batch=64, new_tokens=256),
        "generate_static": lambda: bench_generate(model_dir, tasks, sink, batch=64, new_tokens=256, cache="static"),
        "grpo": lambda: bench_grpo(model_dir, tasks[:8], root / "grpo", sink, steps=3, num_generations=8,
                                   completion_len=128, workers=max(1, (os.cpu_count() or 2) - 2)),
        "deepspeed": lambda: (
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511", RANK="0", LOCAL_RANK="0",
                              WORLD_SIZE="1"),
            bench_sft(model_dir, data, root / "sft_ds", "bf16+zero2", sink, batch=args.batch,
                      max_steps=args.sft_steps, deepspeed=ds),
        ),
    }
    for name, bench in benches.items():
        if name in args.skip or (args.only is not None and name not in args.only):
            continue
        try:
            bench()
        except Exception as err:  # one failed measurement must not lose the others
            emit({"bench": name, "error": repr(err)[:500]}, sink)
            torch.cuda.empty_cache()
        args.out.write_text(json.dumps(sink, indent=2))


if __name__ == "__main__":
    main()
