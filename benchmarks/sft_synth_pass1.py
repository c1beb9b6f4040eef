"""Does SFT on the synthetic, simulator-verified corpus help? Base model vs its SFT on the
corpus, test Pass@1 (issue 14), built from the project's library functions only:

  corpus  chorus.synth.verify.generate_and_verify, in chunks (each chunk's statistics
          file marks it done, so a cut run resumes at the next chunk)
  sft     chorus.data.build_stage_dataset (every verified train stimulus, variants
          included, + the shipped train references) -> chorus.sft.train_stage
  eval    chorus.generate.sample_completions (k per test task, base and SFT model) ->
          chorus.harness.score.score_generations (sandbox, guard on) -> chorus.metrics

`--tasks results/<run>/tasks/manifest.json` takes the corpus the workflow built instead
(rules/synth.smk + prepare_tasks, contamination-checked): the corpus phase then only
records its statistics. Every phase skips when its output exists under --work, and the steps inside a phase
resume (generation and scoring from their `.partial` sidecars), so the run may be split
over several commands. --out is rewritten after every phase with what exists so far.

On one H200 (16 cores, no ccache; commands of < 9.5 min): `--phases corpus` (~3-5 min;
it stops between chunks near --time-budget: run it again until corpus.json exists), then
`--phases sft` (~1-5 min), then `--phases eval` (~4-7 min; a cut run resumes):

  PYTHONPATH=src USE_HUB_KERNELS=0 python3 benchmarks/sft_synth_pass1.py --model /root/smollm2-135m \
      --work /root/sft_synth --out /root/sft_synth/report.json --phases corpus
  PYTHONPATH=src python benchmarks/sft_synth_pass1.py --smoke --work /tmp/smoke --out /tmp/smoke.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chorus.data import build_stage_dataset
from chorus.generate import sample_completions
from chorus.harness.sandbox import SandboxLimits
from chorus.harness.score import prebuild, score_generations
from chorus.harness.timeouts import TimeoutPolicy
from chorus.io import atomic_write_json, read_jsonl
from chorus.metrics import bootstrap_interval, paired_bootstrap_interval, pass_at_k
from chorus.prompts import extract_answer
from chorus.settings import Sampling
from chorus.synth.corpus import shard_jobs
from chorus.synth.verify import generate_and_verify
from chorus.tasks import load_manifest, load_task, load_tasks

REPO = Path(__file__).resolve().parents[1]
PHASES = ("corpus", "sft", "eval")
MODELS = ("base", "sft")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/root/sft_synth"), help="phase outputs (resumable)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "sft_synth_pass1_h200.json")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES))
    parser.add_argument("--model", default="/root/smollm2-135m", help="base model folder (HF format)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on CPU with a tiny local model")
    # corpus
    parser.add_argument("--tasks", type=Path, default=None,
                        help="the workflow's task manifest (results/<run>/tasks/manifest.json): use its synthetic "
                             "tasks instead of generating a corpus here")
    parser.add_argument("--train-designs", type=int, default=160)
    parser.add_argument("--test-designs", type=int, default=48)
    parser.add_argument("--variants", type=int, default=4, help="reference stimuli per design")
    parser.add_argument("--test-families", default="decoder,seq_detect", help="held-out families (test only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=14, help="parallel builds / simulations")
    parser.add_argument("--chunks", type=int, default=8, help="corpus chunks (the unit of resumption)")
    parser.add_argument("--time-budget", type=float, default=500.0,
                        help="corpus: start no chunk that would end after this many seconds, judged by the "
                             "slowest chunk so far (rerun to continue)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="Verilator build cache (default: harness's)")
    # sft
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=4096)
    parser.add_argument("--save-steps", type=int, default=50, help="checkpoints: a cut SFT resumes from the last")
    parser.add_argument("--attn", default="sdpa", help="sdpa: no torch.compile wait (flex_attention costs minutes)")
    # eval
    parser.add_argument("--k", type=int, default=8, help="samples per test task")
    parser.add_argument("--eval-models", nargs="+", choices=MODELS, default=list(MODELS),
                        help="models the eval phase evaluates in this call (each is kept once done)")
    parser.add_argument("--max-new-tokens", type=int, default=1536,
                        help="the longest synthetic references are ~2,700 tokens, the mean ~550")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--sampler", default="static", help="chorus.generate sampler, where the library has them")
    parser.add_argument("--gen-batch-size", type=int, default=64)
    parser.add_argument("--shipped-test-limit", type=int, default=None, help="first N shipped test tasks only")
    parser.add_argument("--sim-timeout", type=float, default=30.0, help="sandbox wall-clock limit per sample (s)")
    parser.add_argument("--timeout-factor", type=float, default=10.0,
                        help="per-task limit = factor x the reference's wall time (floor 5 s, at most "
                             "--sim-timeout), where the library has TimeoutPolicy; 0: --sim-timeout for all")
    parser.add_argument("--guard", action=argparse.BooleanOptionalAction, default=True,
                        help="the sandbox's audit-hook guard (--no-guard to turn it off)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples over tasks")
    args = parser.parse_args(argv)
    # each phase's record keeps the command that ran it (phases run in separate calls)
    args.command = "python benchmarks/sft_synth_pass1.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.smoke:
        args.train_designs, args.test_designs, args.variants, args.chunks = 2, 1, 2, 2
        args.workers, args.epochs, args.batch_size, args.max_length = 2, 1.0, 2, 2048
        args.k, args.max_new_tokens, args.gen_batch_size = 2, 24, 8
        args.shipped_test_limit = 1 if args.shipped_test_limit is None else args.shipped_test_limit
        args.sim_timeout, args.bootstrap, args.time_budget = 20.0, 200, 1e9
    return args


def timed(record: dict, name: str, fn):
    start = time.perf_counter()
    value = fn()
    record[name] = round(time.perf_counter() - start, 2)
    return value


# ---------------------------------------------------------------- corpus

def corpus_dir(work: Path) -> Path:
    return work / "corpus"


def workflow_corpus(args) -> dict:
    """The statistics of the corpus the workflow built (--tasks): its synth/corpus.json and
    the contamination check of prepare_tasks, both beside the manifest."""
    run = args.tasks.parent.parent
    listing = json.loads((run / "synth" / "corpus.json").read_text())
    contamination = json.loads((args.tasks.parent / "contamination.json").read_text())
    summary = {k: v for k, v in listing.items() if k != "tasks"}
    summary.update(source=str(args.tasks), complete=True,
                   contamination={k: contamination.get(k) for k in ("max_similarity", "threshold", "passed")})
    atomic_write_json(args.work / "corpus.json", summary)
    return summary


def phase_corpus(args) -> dict:
    """Generate and verify the corpus chunk by chunk; `chunks/<i>.json` marks chunk i done.
    Returns the summed statistics (complete: every chunk done)."""
    if args.tasks:
        return workflow_corpus(args)
    out, chunk_dir = corpus_dir(args.work), args.work / "corpus_chunks"
    chunk_dir.mkdir(parents=True, exist_ok=True)
    cfg = {"seed": args.seed, "families": "all", "train_designs": args.train_designs,
           "test_designs": args.test_designs,
           "test_families": [f for f in args.test_families.split(",") if f]}
    start, slowest = time.perf_counter(), 0.0
    for chunk in range(args.chunks):
        marker = chunk_dir / f"{chunk}.json"
        if marker.exists():
            continue
        if time.perf_counter() - start + 1.3 * slowest > args.time_budget:
            print(f"corpus: time budget spent before chunk {chunk}; run the corpus phase again", flush=True)
            break
        chunk_start = time.perf_counter()
        jobs = shard_jobs(cfg, chunk, args.chunks)
        stats = generate_and_verify(jobs, out, seed=args.seed, variants=args.variants, workers=args.workers,
                                    cache_dir=args.cache_dir)
        atomic_write_json(marker, stats)
        slowest = max(slowest, time.perf_counter() - chunk_start)
        print(json.dumps({"corpus_chunk": chunk, **{k: stats[k] for k in ("designs", "kept", "examples", "wall_s")}}),
              flush=True)
    done = [json.loads(p.read_text()) for p in sorted(chunk_dir.glob("*.json"))]
    totals: Counter = Counter()
    rejected: Counter = Counter()
    for stats in done:
        totals.update({k: stats[k] for k in ("designs", "kept", "examples", "variants_dropped", "wall_s")})
        rejected.update(stats["rejected"])
    summary = {**dict(totals), "rejected": dict(rejected), "chunks_done": len(done), "chunks": args.chunks,
               "complete": len(done) == args.chunks, "config": {**cfg, "variants": args.variants}}
    summary["wall_s"] = round(summary.get("wall_s", 0.0), 1)
    if summary["complete"]:
        tasks = corpus_tasks(args)
        splits = Counter(t.split for t in tasks)
        summary.update(train_tasks=splits["train"], test_tasks=splits["test"],
                       train_examples=sum(len(t.references()) for t in tasks if t.split == "train"))
        atomic_write_json(args.work / "corpus.json", summary)
    return summary


def corpus_tasks(args):
    """The verified tasks of the corpus (not the `.staging` folder a cut chunk leaves)."""
    if args.tasks:
        return [t for t in load_manifest(args.tasks) if t.source == "synthetic"]
    out = corpus_dir(args.work)
    folders = sorted(d for d in out.iterdir() if d.is_dir() and not d.name.startswith(".")) if out.is_dir() else []
    return [load_task(d) for d in folders]


def synthetic_tasks(args, split: str):
    return [t for t in corpus_tasks(args) if t.split == split]


def shipped_test_tasks(args):
    tasks = load_tasks(splits="test")
    return tasks[: args.shipped_test_limit] if args.shipped_test_limit is not None else tasks


# ---------------------------------------------------------------- sft

def base_model(args) -> Path:
    """--model, or in --smoke a tiny random-init model built here (tokenizer trained on
    the shipped tasks)."""
    if not args.smoke:
        return Path(args.model)
    from chorus.modeling import build_tiny_model, task_corpus

    tiny = args.work / "tiny_model"
    if not tiny.exists():
        build_tiny_model(tiny, task_corpus(load_tasks(splits="train")), hidden_size=32, num_layers=1,
                         num_heads=2, vocab_size=1024, max_position_embeddings=4096)
    return tiny


def phase_sft(args) -> dict:
    from chorus.settings import SFTStage
    from chorus.sft import train_stage

    model_out = args.work / "sft_model"
    metrics_path = args.work / "sft.json"
    if model_out.is_dir() and metrics_path.exists():
        return json.loads(metrics_path.read_text())
    if not (args.work / "corpus.json").exists():
        raise SystemExit("sft: the corpus phase is not complete yet (run --phases corpus first)")
    train = synthetic_tasks(args, "train") + load_tasks(splits="train")
    data = args.work / "sft_train.jsonl"
    # every verified reference and variant of every train task (synthetic + shipped)
    rows = build_stage_dataset(train, {"reference": ["easy", "medium", "hard"], "variants": True}, data)
    timings: dict = {}
    stage = SFTStage(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, max_length=args.max_length,
                     seed=args.seed, attention=args.attn, liger_kernel=False, packing=False, warmup=0.03,
                     save_steps=args.save_steps)
    metrics = timed(timings, "train_s", lambda: train_stage(
        base_model(args), data, model_out, stage, device="cpu" if args.smoke else None))
    summary = {
        "rows": len(rows),
        "rows_by_source": dict(Counter("synthetic" if r["task_id"].startswith("syn_") else "shipped" for r in rows)),
        "train_tasks": len({r["task_id"] for r in rows}),
        **{k: metrics.get(k) for k in ("steps", "first_loss", "last_loss", "train_loss", "tokens",
                                       "tokens_per_s", "runtime_s", "bf16", "attn_implementation")},
        "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size, "max_length": args.max_length,
        **timings,
        "command": args.command,
    }
    atomic_write_json(metrics_path, summary)
    return summary


# ---------------------------------------------------------------- eval

def summarize_scores(scored: list[dict], tasks, k: int, resamples: int) -> dict:
    by_task: dict[str, list[dict]] = {t.id: [] for t in tasks}
    for row in scored:
        by_task[row["task_id"]].append(row)
    per_task = {}
    for task_id, rows in by_task.items():
        n, c = len(rows), sum(bool(r["passed"]) for r in rows)
        per_task[task_id] = {"n": n, "c": c, "pass@1": pass_at_k(n, c, 1) if n else 0.0,
                             "mean_coverage": sum(r["score"] for r in rows) / n if n else 0.0}
    values = [v["pass@1"] for v in per_task.values()]
    split = {"synthetic": [v["pass@1"] for t, v in per_task.items() if t.startswith("syn_")],
             "shipped": [v["pass@1"] for t, v in per_task.items() if not t.startswith("syn_")]}
    return {
        "tasks": len(per_task),
        "samples": len(scored),
        "pass@1": sum(values) / len(values) if values else 0.0,
        "pass@1_ci95": list(bootstrap_interval(values, resamples=resamples)),
        "pass@1_by_source": {s: (sum(v) / len(v) if v else None) for s, v in split.items()},
        "mean_coverage": sum(r["score"] for r in scored) / len(scored) if scored else 0.0,
        "statuses": dict(Counter(r["status"] for r in scored)),
        "per_task": per_task,
    }


def phase_eval(args) -> dict:
    """Evaluate each model of --eval-models; `eval_<model>.json` marks one done, so the
    models can be evaluated in separate calls (and a cut call resumes per sample)."""
    if "sft" in args.eval_models and not (args.work / "sft_model").is_dir():
        raise SystemExit("eval: the sft phase is not complete yet (run --phases sft first)")
    tasks = synthetic_tasks(args, "test") + shipped_test_tasks(args)
    by_id = {t.id: t for t in tasks}
    limits = SandboxLimits(timeout_s=args.sim_timeout, guard=args.guard)
    timeouts = TimeoutPolicy(factor=args.timeout_factor) if args.timeout_factor else None
    report = {"test_tasks": len(tasks), "synthetic_test_tasks": sum(t.id.startswith("syn_") for t in tasks),
              "k": args.k, "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
              "sampler": args.sampler, "guard": args.guard, "sim_timeout_s": args.sim_timeout,
              "timeout_policy": repr(timeouts), "models": {}}
    # the designs compile (and their references are timed) on the CPUs while the GPU samples
    prebuilt = []
    if any(not (args.work / f"eval_{name}.json").exists() for name in args.eval_models):
        builds = ThreadPoolExecutor(max_workers=max(1, args.workers - 2), thread_name_prefix="prebuild")
        prebuilt = [builds.submit(prebuild, t, args.cache_dir, limits, timeouts) for t in tasks]
        builds.shutdown(wait=False)
    for name, model in (("base", base_model(args)), ("sft", args.work / "sft_model")):
        done = args.work / f"eval_{name}.json"
        if done.exists():
            report["models"][name] = json.loads(done.read_text())
            continue
        if name not in args.eval_models:
            continue
        timings: dict = {}
        generations = args.work / f"gen_{name}.jsonl"
        gen_stats = timed(timings, "generate_s", lambda: sample_completions(
            model, tasks, args.k, generations,
            Sampling(temperature=args.temperature, max_new_tokens=args.max_new_tokens, sampler=args.sampler,
                     batch_size=args.gen_batch_size),
            seed=args.seed, device="cpu" if args.smoke else None))
        rows = read_jsonl(generations)
        timed(timings, "prebuild_wait_s", lambda: [build.result() for build in prebuilt])
        scored = timed(timings, "score_s", lambda: score_generations(
            rows, by_id, args.work / f"scores_{name}.jsonl", workers=args.workers,
            limits=limits, cache_dir=args.cache_dir, timeouts=timeouts,
            extract=extract_answer))
        missing = {(r["task_id"], r["sample_id"]) for r in rows} - {(s["task_id"], s["sample_id"]) for s in scored}
        report["models"][name] = {
            "model": str(model),
            **summarize_scores(scored, tasks, args.k, args.bootstrap),
            "samples_without_verdict": len(missing),
            "generate_tokens_per_s": gen_stats.get("tokens_per_s"),
            "new_tokens": gen_stats.get("new_tokens"),
            **timings,
            "command": args.command,
        }
        atomic_write_json(done, report["models"][name])
        print(json.dumps({"eval": name, **{k: report["models"][name][k] for k in
                                           ("pass@1", "pass@1_ci95", "mean_coverage", "statuses")}}), flush=True)
    if {"base", "sft"} <= report["models"].keys():
        report["sft_minus_base"] = paired_difference(report["models"]["sft"], report["models"]["base"], args.bootstrap)
    atomic_write_json(args.work / "eval.json", report)
    return report


def paired_difference(model: dict, baseline: dict, resamples: int) -> dict:
    """Pass@1 of `model` minus `baseline` with the paired 95% bootstrap interval over tasks."""
    tasks = sorted(model["per_task"].keys() & baseline["per_task"].keys())
    ours = [model["per_task"][t]["pass@1"] for t in tasks]
    theirs = [baseline["per_task"][t]["pass@1"] for t in tasks]
    return {"tasks": len(tasks), "difference": (sum(ours) - sum(theirs)) / len(tasks) if tasks else 0.0,
            "ci95": list(paired_bootstrap_interval(ours, theirs, resamples=resamples))}


# ---------------------------------------------------------------- report

def versions() -> dict:
    import importlib.metadata as md

    found = {"python": platform.python_version()}
    for package in ("torch", "transformers", "trl", "cocotb", "datasets", "accelerate"):
        try:
            found[package] = md.version(package)
        except md.PackageNotFoundError:
            found[package] = None
    try:
        from chorus.harness.toolchain import verilator_version

        found["verilator"] = verilator_version()
    except Exception:  # no toolchain: the report still gets written
        found["verilator"] = None
    try:
        import torch

        found["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # no CUDA runtime: the report still gets written
        found["device"] = "cpu"
    return found


def write_report(args, phases: dict, phase_seconds: dict) -> dict:
    def saved(name):
        path = args.work / name
        return json.loads(path.read_text()) if path.exists() else None

    previous = json.loads(args.out.read_text()) if args.out.exists() else {}
    report = {
        "benchmark": "sft_synth_pass1",
        "command": args.command,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "command"},
        "corpus": phases.get("corpus") or saved("corpus.json"),
        "sft": phases.get("sft") or saved("sft.json"),
        "eval": phases.get("eval") or saved("eval.json"),
        "phase_seconds": {**previous.get("phase_seconds", {}), **phase_seconds},
        "versions": versions(),
    }
    evaluation = report["eval"] or {}
    report["pass@1"] = {m: evaluation["models"][m]["pass@1"] for m in evaluation.get("models", {})}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, report)
    return report


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.work.mkdir(parents=True, exist_ok=True)
    phases, phase_seconds = {}, {}
    runners = {"corpus": phase_corpus, "sft": phase_sft, "eval": phase_eval}
    finished = {"corpus": "corpus.json", "sft": "sft.json", "eval": "eval.json"}
    for phase in PHASES:
        if phase in args.phases:
            already = (args.work / finished[phase]).exists()
            seconds: dict = {}
            phases[phase] = timed(seconds, phase, lambda: runners[phase](args))
            if not already:  # a skipped phase keeps the time of the run that did it
                phase_seconds.update(seconds)
            write_report(args, phases, phase_seconds)
            if phase == "corpus" and not phases[phase]["complete"]:
                break  # later phases need the whole corpus: rerun to continue
    report = write_report(args, phases, phase_seconds)
    print(json.dumps({"out": str(args.out), "pass@1": report["pass@1"],
                      "phase_seconds": report["phase_seconds"]}), flush=True)
    return report


if __name__ == "__main__":
    main()
