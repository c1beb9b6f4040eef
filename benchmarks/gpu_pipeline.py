"""The CHORUS stages on a GPU with the project's own code: staged SFT, two GRPO experts
with the Verilator coverage reward, mergekit merges, sampling and scoring of the test
tasks. The model is a random-init model of a small open architecture's shape (Qwen2.5-
0.5B-like), built from a config: nothing is downloaded.

  python benchmarks/gpu_pipeline.py --out /tmp/pipeline.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from chorus.data import build_stage_dataset
from chorus.generate import sample_completions
from chorus.harness import score_many
from chorus.merge import mergekit_config, run_merge
from chorus.modeling import build_model_from_shape, build_tiny_model, task_corpus
from chorus.prompts import extract_stimulus
from chorus.rl import train_expert
from chorus.settings import GRPOExpert, Sampling, SFTStage
from chorus.sft import train_stage
from chorus.tasks import load_tasks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("gpu_pipeline.json"))
    parser.add_argument("--k", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    root = Path(tempfile.mkdtemp(prefix="chorus-pipe-"))
    train, test = load_tasks(splits="train"), load_tasks(splits="test")
    timings, report = {}, {}

    def timed(name, fn):
        start = time.perf_counter()
        value = fn()
        timings[name] = round(time.perf_counter() - start, 2)
        print(json.dumps({"stage": name, "seconds": timings[name]}), flush=True)
        return value

    tok = build_tiny_model(root / "tok", task_corpus(train), hidden_size=32, num_layers=1, num_heads=2,
                           vocab_size=2048, max_position_embeddings=2048)
    base = timed("build_base", lambda: build_model_from_shape(root / "base", "0.5b", tok))
    stages = [("format", {"format": True}, 2), ("full", {"reference": ["easy", "medium", "hard"]}, 4)]
    model = base
    for name, mix, epochs in stages:
        data = root / f"{name}.jsonl"
        build_stage_dataset(train, mix, data)
        metrics = timed(f"sft_{name}", lambda: train_stage(
            model, data, root / f"sft_{name}", SFTStage(epochs=epochs, lr=5e-5, batch_size=4, max_length=4096),
            device="cuda"))
        report[f"sft_{name}"] = {k: metrics[k] for k in ("steps", "first_loss", "last_loss", "tokens_per_s")}
        model = root / f"sft_{name}"
    experts = []
    for name, reward, seed in (("dense", "dense", 1), ("binary", "binary", 2)):
        metrics = timed(f"rl_{name}", lambda: train_expert(
            model, train, root / f"rl_{name}", GRPOExpert(reward=reward, steps=4, num_generations=8, batch_size=16,
                                                          max_completion_length=256, lr=1e-6, seed=seed),
            sim_workers=14, device="cuda"))
        report[f"rl_{name}"] = {"steps": metrics["steps"], "reward_time_fraction": metrics["reward_time_fraction"],
                                "statuses": metrics["reward_calls"][-1]["statuses"],
                                "mean_reward": [round(c["mean_reward"], 4) for c in metrics["reward_calls"]]}
        experts.append(str(root / f"rl_{name}"))
    merges = {}
    for method, params in (("linear", {}), ("ties", {"weight": 0.5, "density": 0.5})):
        config = mergekit_config(method, experts, str(model), params)
        merges[method] = timed(f"merge_{method}", lambda: run_merge(config, root / f"merge_{method}", device="cuda"))
    models = {"sft_full": model, "rl_dense": experts[0], "rl_binary": experts[1],
              **{f"merge_{m}": p for m, p in merges.items()}}
    by_id = {t.id: t for t in test}
    for name, path in models.items():
        out = root / f"gen_{name}.jsonl"
        stats = timed(f"generate_{name}", lambda: sample_completions(path, test, args.k, out,
                                                                     Sampling(max_new_tokens=256), device="cuda"))
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        results = timed(f"score_{name}", lambda: score_many(
            [(by_id[r["task_id"]], extract_stimulus(r["completion"])) for r in rows], workers=14))
        statuses = {}
        for r in results:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        report[f"eval_{name}"] = {"pass@1": sum(r.passed for r in results) / len(results),
                        "mean_coverage": sum(r.score for r in results) / len(results),
                        "generate_tokens_per_s": stats["tokens_per_s"], "statuses": statuses}
        print(json.dumps({f"eval_{name}": report[f"eval_{name}"]}), flush=True)
    args.out.write_text(json.dumps({"timings": timings, "report": report}, indent=2))


if __name__ == "__main__":
    main()
