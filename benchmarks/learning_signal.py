"""Issue 27's learning signal: an SFT model that passes and stops, and a dense-reward GRPO
expert trained from it, on the fixed evaluation set (208 tasks of the reproduction corpus:
its synthetic test split + the shipped test tasks), built from the project's functions:

  verify   chorus.harness.score.score_generations of --budgets programmatic references
           (chorus.synth.program in --program-style: the input widths written in a table,
           or read from the design; run lengths drawn per design) of --sft-designs-per-family
           synthetic train designs of each family: the passing ones are the SFT data
  build    the same for the evaluation designs (one program at the default budget: what
           the program alone reaches, no model) and then every train design: builds every
           design once, evaluation designs first, beside SFT on the GPU
  sft      chorus.data.sft_row of each verified program + the shipped train references
           (+ --repair-rows repair conversations, chorus.repair: a weakened program, the
           feedback on its simulation, the verified program) -> chorus.sft.train_stage
  probe    the SFT model's --probe-k answers to every train task, sampled and scored as
           the evaluation does: each train task's pass rate
  rl       chorus.rl.train_expert from the SFT model on the train split (dense reward;
           `rl_binary`: the binary-reward ablation, same settings); --rl-tasks unsolved:
           only the train tasks the probe saw fail at least once
  eval     chorus.generate.sample_completions under one protocol (k, temperature, top-p,
           token cap: EVAL_PROTOCOL) -> score_generations (sandbox, guard on) ->
           Pass@1 with the bootstrap interval over tasks, statuses, cut-off answers,
           misses by metric, and each model's paired difference to the SFT model

Every phase skips when its output exists under --work and resumes inside (journals), so
the run may be split over several commands and the CPU phase (build) may run beside the
GPU phases. The report (--out) is rewritten after every phase.

  PYTHONPATH=src USE_HUB_KERNELS=0 python3 benchmarks/learning_signal.py --model /root/smollm2-135m \\
      --tasks results/smollm2_h200/tasks/manifest.json --work /root/ls --phases sft eval_sft
  PYTHONPATH=src python benchmarks/learning_signal.py --smoke --work /tmp/ls --out /tmp/ls.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
import logging
import os
import random
import sys
from collections import Counter
from pathlib import Path

from chorus.data import sft_row
from chorus.generate import sample_completions
from chorus.harness.feedback import feedback_field
from chorus.harness.sandbox import SandboxLimits
from chorus.harness.score import score_generations
from chorus.harness.timeouts import TimeoutPolicy
from chorus.io import atomic_write_json, read_jsonl, write_jsonl
from chorus.metrics import bootstrap_interval, paired_bootstrap_interval, pass_at_k
from chorus.prompts import extract_answer, format_completion, is_cut_off
from chorus.settings import Sampling
from chorus.synth.corpus import design_of
from chorus.synth.program import PROGRAM_STYLES, Budget, draw_budgets, render_program
from chorus.tasks import load_manifest, load_tasks

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sft_synth_pass1 import base_model, timed, versions  # noqa: E402  (benchmarks/ is scripts, not a package)

REPO = Path(__file__).resolve().parents[1]
PHASES = ("verify", "build", "sft", "eval_sft", "probe", "rl", "eval_rl", "rl_binary", "eval_rl_binary")
# one evaluation protocol for every model (CVDP's and LLM4Cov's: T 0.7, top-p 0.8, n 5)
EVAL_PROTOCOL = {"k": 5, "temperature": 0.7, "top_p": 0.8, "max_new_tokens": 1536}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("/root/ls"))
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "learning_signal.json")
    p.add_argument("--phases", nargs="+", choices=PHASES,
                   help="default: every phase, the probe only for --rl-tasks unsolved")
    p.add_argument("--model", default="/root/smollm2-135m", help="base model folder (HF format)")
    p.add_argument("--tasks", type=Path, default=None, help="task manifest of the corpus (the fixed evaluation)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes on CPU: a tiny corpus and a tiny model")
    p.add_argument("--workers", type=int, default=14, help="parallel builds / simulations")
    p.add_argument("--sim-timeout", type=float, default=30.0)
    p.add_argument("--budgets", type=int, default=2, help="programs per train design (chorus.synth.program)")
    p.add_argument("--sft-designs-per-family", type=int, default=20)
    p.add_argument("--program-style", choices=PROGRAM_STYLES, default="table",
                   help="the programs' style (chorus.synth.program): input widths in a table, or read from the design")
    # sft
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-length", type=int, default=4096)
    p.add_argument("--repair-rows", type=int, default=0,
                   help="SFT: up to N repair conversations (a weak answer, its feedback, a verified program)")
    # probe and the RL task choice
    p.add_argument("--probe-k", type=int, default=4, help="probe: answers per train task")
    # a task the SFT model always passes gives GRPO groups of equal rewards: no gradient
    p.add_argument("--rl-tasks", choices=("all", "unsolved"), default="all",
                   help="rl phases: every train task, or those with a probe pass rate below 1")
    # rl
    p.add_argument("--rl-steps", type=int, default=256)
    p.add_argument("--rl-time-budget-s", type=float, default=None,
                   help="end each expert's training with the rollout batch after which another would pass this")
    # models trained on one answer write a broken program in a second turn (benchmarks/README.md):
    # episodes of several rounds reward the last answer, so GRPO sees that turn
    p.add_argument("--rl-rounds", type=int, default=None,
                   help="coverage-closure rounds per GRPO episode (rl.rounds, docs/rounds.md; default: one answer)")
    # at 2e-5 (decayed linearly) 64 steps left 0.06-0.4% of the tokens in the clipped
    # region and the answers as close to the SFT model's as two SFT runs' (benchmarks/README.md)
    p.add_argument("--rl-lr", type=float, default=5e-5)
    p.add_argument("--rl-generations", type=int, default=8, help="completions per prompt (GRPO group)")
    # micro-batches of 32 rows with answers up to 1,536 tokens ran out of an H100's memory in
    # the training step's forward, twice (benchmarks/README.md): the same 32-completion steps
    # in two halves (the forward's memory grows with rows x (prompt + completion) tokens)
    p.add_argument("--rl-batch", type=int, default=16, help="completions per micro-batch")
    p.add_argument("--rl-grad-accum", type=int, default=2, help="micro-batches per optimizer step")
    p.add_argument("--rl-steps-per-generation", type=int, default=32,
                   help="micro-batches per rollout batch (TRL's steps_per_generation)")
    # rollouts sampled like the evaluation (EVAL_PROTOCOL): at T 1.0 and 768 tokens, 19% of
    # them were syntax errors and 33% runtime errors against 0.3% and 10% evaluated
    p.add_argument("--rl-max-completion", type=int, default=1536)
    p.add_argument("--rl-temperature", type=float, default=0.7)
    p.add_argument("--rl-top-p", type=float, default=0.8)
    # eval
    p.add_argument("--gen-batch-size", type=int, default=512)
    p.add_argument("--bootstrap", type=int, default=2000)
    args = p.parse_args(argv)
    args.command = "python benchmarks/learning_signal.py " + " ".join(sys.argv[1:] if argv is None else argv)
    args.protocol = dict(EVAL_PROTOCOL)
    if args.phases is None:
        args.phases = [phase for phase in PHASES if phase != "probe" or args.rl_tasks == "unsolved"]
    if args.smoke:
        args.workers, args.epochs, args.batch_size, args.max_length = 2, 1.0, 2, 2048
        # one optimizer step of two micro-batches of one group: the default shape, smaller
        args.rl_steps, args.rl_generations, args.rl_batch = 1, 2, 2
        args.rl_grad_accum, args.rl_steps_per_generation = 2, 2
        args.rl_max_completion, args.gen_batch_size, args.bootstrap = 16, 8, 100
        args.protocol.update(k=2, max_new_tokens=24)
        args.probe_k = 2
    return args


# ---------------------------------------------------------------- tasks

def smoke_corpus(args) -> Path:
    """--smoke: a tiny verified corpus (two train designs, one test design) and its manifest."""
    from chorus.synth.verify import generate_and_verify

    manifest = args.work / "corpus" / "manifest.json"
    if not manifest.exists():
        jobs = [("train", 0, "counter"), ("train", 1, "mux"), ("test", 0, "decoder")]
        stats = generate_and_verify(jobs, args.work / "corpus", seed=0, variants=1, workers=args.workers)
        entries = [{"dir": str(args.work / "corpus" / tid), "split": tid.split("_")[2], "source": "synthetic"}
                   for tid in stats["tasks"]]
        atomic_write_json(manifest, {"source": "smoke", "tasks": entries})
    return manifest


def task_sets(args) -> tuple[list, list]:
    """(train tasks, evaluation tasks): the corpus's synthetic splits + the shipped ones."""
    manifest = smoke_corpus(args) if args.smoke else args.tasks
    synthetic = [t for t in load_manifest(manifest) if t.source == "synthetic"]
    shipped_test = load_tasks(splits="test")[:1] if args.smoke else load_tasks(splits="test")
    train = [t for t in synthetic if t.split == "train"] + load_tasks(splits="train")
    evaluation = [t for t in synthetic if t.split == "test"] + shipped_test
    return train, evaluation


def program_rows(tasks, budgets: int, style: str) -> list[dict]:
    """Generation-style rows holding programmatic references (in `style`) of the synthetic
    tasks: `budgets` of them per task (drawn by the task id), or 0: one at the default budget."""
    rows = []
    for t in tasks:
        if t.source != "synthetic":
            continue
        design = design_of(t)
        rows += [{"task_id": t.id, "sample_id": i,
                  "completion": format_completion(render_program(design, b, style=style))}
                 for i, b in enumerate(program_budgets(t, budgets))]
    return rows


def program_budgets(task, budgets: int) -> list[Budget]:
    """The budgets of program_rows' programs of `task`, in sample id order."""
    return draw_budgets(random.Random(task.id), budgets) if budgets else [Budget()]


def sft_designs(args, train) -> list:
    """The first --sft-designs-per-family synthetic train tasks of each family."""
    seen: Counter = Counter()
    chosen = []
    for t in train:
        if t.source == "synthetic" and seen[t.family] < args.sft_designs_per_family:
            seen[t.family] += 1
            chosen.append(t)
    return chosen


def score_programs(args, tasks, rows, name: str) -> list[dict]:
    """Programs to programs_<name>.jsonl, their verdicts to scores_program_<name>.jsonl."""
    sandbox, timeouts = limits(args)
    write_jsonl(args.work / f"programs_{name}.jsonl", rows)
    return score_generations(rows, {t.id: t for t in tasks}, args.work / f"scores_program_{name}.jsonl",
                             workers=args.workers, limits=sandbox, timeouts=timeouts, extract=extract_answer)


def limits(args) -> tuple[SandboxLimits, TimeoutPolicy]:
    return SandboxLimits(timeout_s=args.sim_timeout), TimeoutPolicy(factor=10.0)


# ---------------------------------------------------------------- phases

def phase_verify(args, train, evaluation) -> dict:
    """Score --budgets programs of each SFT design: the passing ones are the SFT data."""
    tasks = sft_designs(args, train)
    scored = score_programs(args, tasks, program_rows(tasks, args.budgets, args.program_style), "sft")
    return {"designs": len(tasks), "programs": len(scored), "passed": sum(bool(r["passed"]) for r in scored),
            "statuses": dict(Counter(r["status"] for r in scored)), "program_style": args.program_style}


def phase_build(args, train, evaluation) -> dict:
    """Build every design by scoring programs: the evaluation's first (their builds are
    the first evaluation's wait; the default-budget program's Pass@1 there is what the
    program alone reaches, no model), then every train design (GRPO's), --budgets each."""
    report = {}
    for name, tasks, budgets in (("test", evaluation, 0), ("train", train, args.budgets)):
        rows = program_rows(tasks, budgets, args.program_style)
        scored = timed(report, f"{name}_s", lambda: score_programs(args, tasks, rows, name))
        report[name] = summarize(scored, [t for t in tasks if t.source == "synthetic"], args.bootstrap)
        report[name].pop("per_task")
    return {**report, "program_style": args.program_style}


def phase_sft(args, train, evaluation) -> dict:
    from chorus.settings import SFTStage
    from chorus.sft import train_stage

    data = args.work / "sft_train.jsonl"
    by_id = {t.id: t for t in train}
    programs = read_jsonl(args.work / "programs_sft.jsonl")
    passed = {(r["task_id"], r["sample_id"]) for r in read_jsonl(args.work / "scores_program_sft.jsonl")
              if r["passed"]}
    rows = [sft_row(by_id[r["task_id"]], extract_answer(r["completion"], "cocotb"), "program")
            for r in programs if (r["task_id"], r["sample_id"]) in passed]
    rows += [sft_row(t, t.reference_stimulus.read_text(), "reference") for t in train if t.source == "shipped"]
    repairs, repair_stats = sft_repair_rows(args, by_id, programs, passed) if args.repair_rows else ([], None)
    rows += repairs
    write_jsonl(data, rows)
    timings: dict = {}
    stage = SFTStage(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, max_length=args.max_length,
                     attention="sdpa", liger_kernel=False, packing=False, warmup=0.03, save_steps=100)
    metrics = timed(timings, "train_s", lambda: train_stage(
        base_model(args), data, args.work / "sft_model", stage, device="cpu" if args.smoke else None))
    return {"rows": len(rows), "rows_by_source": dict(Counter(r["source"] for r in rows)),
            "designs": len({r["task_id"] for r in rows}),
            **{k: metrics.get(k) for k in ("steps", "first_loss", "last_loss", "tokens", "tokens_per_s")},
            "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size, "repair": repair_stats, **timings}


def sft_repair_rows(args, by_id: dict, programs: list[dict], passed: set) -> tuple[list[dict], dict]:
    """--repair-rows repair conversations (chorus.repair) of the SFT designs: weakened
    programs and verify's failing ones, simulated with the rounds' feedback, each answered
    by its design's first verified program; rows over --max-length tokens left out."""
    from chorus.modeling import load_tokenizer
    from chorus.repair import repair_rows, row_tokens, weak_answers

    finals: dict[str, dict] = {}
    for row in programs:
        if (row["task_id"], row["sample_id"]) in passed:
            finals.setdefault(row["task_id"], row)
    designs = {tid: (design_of(by_id[tid]), program_budgets(by_id[tid], args.budgets)[row["sample_id"]])
               for tid, row in finals.items()}
    failed = [r for r in programs if r["task_id"] in finals and (r["task_id"], r["sample_id"]) not in passed]
    weak = weak_answers(designs, failed, args.program_style)
    write_jsonl(args.work / "programs_repair.jsonl", weak)
    sandbox, timeouts = limits(args)
    timings: dict = {}
    scores = timed(timings, "simulate_s", lambda: score_generations(
        weak, by_id, args.work / "scores_repair.jsonl", workers=args.workers, limits=sandbox, timeouts=timeouts,
        extract=extract_answer, annotate=feedback_field))
    verified = {tid: extract_answer(row["completion"], "cocotb") for tid, row in finals.items()}
    tokenizer = load_tokenizer(base_model(args))
    rows, stats = repair_rows(weak, scores, by_id, verified, args.repair_rows,
                              fits=lambda row: row_tokens(tokenizer, row) <= args.max_length)
    return rows, {**stats, **timings}


def phase_rl(args, train, evaluation, reward: str) -> dict:
    from chorus.rl import train_expert
    from chorus.settings import GRPOExpert

    sandbox, timeouts = limits(args)
    tasks, choice = rl_tasks(args, train)
    expert = GRPOExpert(name=f"rl_{reward}", reward=reward, num_generations=args.rl_generations,
                        max_completion_length=args.rl_max_completion, steps=args.rl_steps, lr=args.rl_lr,
                        beta=0.0, temperature=args.rl_temperature, top_p=args.rl_top_p, batch_size=args.rl_batch,
                        grad_accum=args.rl_grad_accum, steps_per_generation=args.rl_steps_per_generation,
                        save_steps=args.rl_steps, time_budget_s=args.rl_time_budget_s, rounds=args.rl_rounds)
    out = args.work / ("rl_model" if reward == "dense" else "rl_binary_model")
    timings: dict = {}
    metrics = timed(timings, "train_s", lambda: train_expert(
        args.work / "sft_model", tasks, out, expert, sim_workers=args.workers, sim_limits=sandbox,
        sim_timeouts=timeouts, device="cpu" if args.smoke else None))
    calls = metrics["reward_calls"]
    return {"expert": asdict(expert), "tasks": len(tasks), "task_choice": choice, "trained_steps": metrics["steps"],
            "stopped_by_time_budget": metrics["stopped_by_time_budget"],
            "breakdown": metrics["breakdown"],
            # the training reward per rollout batch: does it move?
            "reward_per_call": [{k: c[k] for k in ("step", "mean_reward", "passed", "n", "statuses")} for c in calls],
            **round_episodes(metrics), **timings}


def round_episodes(metrics: dict) -> dict:
    """With --rl-rounds: per rollout batch, how many episodes used each number of rounds,
    their feedback tokens (masked out of the loss) and each round's in-episode simulation
    seconds, from the expert's metrics (each round's generation: `breakdown.rollout_batches`)."""
    if metrics["rounds"] == 1:
        return {}
    return {"round_episodes": [
        {"rounds_used": dict(sorted(Counter(batch["rounds_used"]).items())),
         "feedback_tokens": sum(batch["feedback_tokens"]),
         "simulation_s": batch["simulation_s"]}
        for batch in metrics["round_episodes"]]}


def rl_tasks(args, train) -> tuple[list, dict]:
    """The train tasks GRPO trains on (--rl-tasks) and a record of the choice: all, or
    those whose probe pass rate is below 1 (a task always passed gives no gradient)."""
    if args.rl_tasks == "all":
        return train, {"rl_tasks": "all"}
    from chorus.rl import rl_dataset

    probe_file = args.work / "probe.json"
    if not probe_file.exists():
        raise SystemExit(f"--rl-tasks unsolved needs the probe phase's {probe_file}: run --phases probe first")
    probe = json.loads(probe_file.read_text())
    unprobed = [t.id for t in train if t.id not in probe["per_task"]]
    if unprobed:
        raise SystemExit(f"{probe_file} has no pass rate for {len(unprobed)} train tasks (e.g. {unprobed[0]})")
    tasks = [t for t in train if probe["per_task"][t.id] < 1.0]
    if not tasks:
        raise SystemExit(f"the probe passed every train task {probe['protocol']['k']} times: nothing to train on")
    # train_expert's rl_dataset repeats the task list whole until a rollout batch's
    # distinct prompts fit; a repeated task then fills several groups of one batch
    prompts = args.rl_batch * args.rl_steps_per_generation // args.rl_generations
    repeats = len(rl_dataset(tasks, min_rows=prompts)) // len(tasks)
    choice = {"rl_tasks": "unsolved", "train_tasks": len(train), "probe_k": probe["protocol"]["k"],
              "probe_pass_histogram": probe["pass_histogram"], "prompts_per_rollout_batch": prompts,
              "task_list_repeats": repeats}
    if repeats > 1:
        choice["note"] = (f"fewer tasks than a rollout batch's {prompts} prompts: the list is repeated {repeats} "
                          "times, so a task may fill several groups of one rollout batch")
    return tasks, choice


def phase_probe(args, train, evaluation) -> dict:
    """The SFT model's --probe-k answers to every train task, sampled and scored under
    the evaluation's protocol: per-task pass rates (`per_task`) for --rl-tasks."""
    _, scored, summary = sample_and_score(args, "sft", train, args.probe_k, "probe")
    passes = Counter(r["task_id"] for r in scored if r["passed"])
    summary["pass_histogram"] = {f"{c}/{args.probe_k}": n for c, n in
                                 sorted(Counter(passes[t.id] for t in train).items())}
    return summary


def sample_and_score(args, model: str, tasks, k: int, name: str) -> tuple[list[dict], list[dict], dict]:
    """k answers of {model}_model per task, sampled under the evaluation's protocol to
    gen_<name>.jsonl and scored to scores_<name>.jsonl (both resume): (answers, verdicts,
    summary with the protocol and the timings)."""
    sandbox, timeouts = limits(args)
    timings: dict = {}
    generations = args.work / f"gen_{name}.jsonl"
    protocol = {**args.protocol, "k": k}
    stats = timed(timings, "generate_s", lambda: sample_completions(
        args.work / f"{model}_model", tasks, k, generations,
        protocol_sampling(protocol, args.gen_batch_size),
        device="cpu" if args.smoke else None))
    rows = read_jsonl(generations)
    scored = timed(timings, "score_s", lambda: score_generations(
        rows, {t.id: t for t in tasks}, args.work / f"scores_{name}.jsonl", workers=args.workers,
        limits=sandbox, timeouts=timeouts, extract=extract_answer))
    summary = summarize(scored, tasks, args.bootstrap)
    summary.update(protocol=protocol, generate_tokens_per_s=stats.get("tokens_per_s"),
                   new_tokens=stats.get("new_tokens"), **timings)
    return rows, scored, summary


def protocol_sampling(protocol: dict, batch_size: int | None) -> Sampling:
    """The Sampling of an evaluation protocol (EVAL_PROTOCOL's keys), the sampler chosen by device."""
    return Sampling(temperature=protocol["temperature"], top_p=protocol["top_p"],
                    max_new_tokens=protocol["max_new_tokens"], sampler="auto", batch_size=batch_size)


def phase_eval(args, train, evaluation, model: str) -> dict:
    rows, _, summary = sample_and_score(args, model, evaluation, args.protocol["k"], model)
    protocol = summary["protocol"]
    at_cap = sum(r.get("new_tokens", 0) >= protocol["max_new_tokens"] for r in rows)
    summary.update(
        cutoff_fraction=at_cap / max(1, len(rows)),
        unclosed_fence=sum(is_cut_off(r["completion"]) for r in rows),
        median_completion_chars=sorted(len(r["completion"]) for r in rows)[len(rows) // 2] if rows else 0)
    return summary


def summarize(scored: list[dict], tasks, resamples: int) -> dict:
    """Pass@1 over tasks with its 95% bootstrap interval, statuses and misses by metric."""
    by_task: dict[str, list[dict]] = {t.id: [] for t in tasks}
    for row in scored:
        by_task.setdefault(row["task_id"], []).append(row)
    per_task = {tid: pass_at_k(len(rows), sum(bool(r["passed"]) for r in rows), 1) if rows else 0.0
                for tid, rows in by_task.items()}
    values = list(per_task.values())
    misses: Counter = Counter()
    targets = {t.id: t.coverage_target for t in tasks}
    for row in scored:
        if row["status"] == "below_target":
            missed = [m for m, goal in targets[row["task_id"]].items() if row.get(f"cov_{m}", 0.0) + 1e-9 < goal]
            misses.update(missed)
            misses["only_" + missed[0] if len(missed) == 1 else "several"] += 1
    return {
        "tasks": len(values), "samples": len(scored),
        "pass1": sum(values) / len(values) if values else 0.0,
        "pass1_ci95": list(bootstrap_interval(values, resamples=resamples)),
        "mean_coverage": sum(r["score"] for r in scored) / len(scored) if scored else 0.0,
        "statuses": dict(Counter(r["status"] for r in scored)),
        "below_target_misses": dict(misses),
        "per_task": per_task,
    }


# ---------------------------------------------------------------- report

def paired(model: dict, baseline: dict, resamples: int) -> dict:
    tasks = sorted(model["per_task"].keys() & baseline["per_task"].keys())
    ours = [model["per_task"][t] for t in tasks]
    theirs = [baseline["per_task"][t] for t in tasks]
    return {"difference": (sum(ours) - sum(theirs)) / max(1, len(tasks)),
            "ci95": list(paired_bootstrap_interval(ours, theirs, resamples=resamples))}


def write_report(args) -> dict:
    done = {name: json.loads((args.work / f"{name}.json").read_text())
            for name in PHASES if (args.work / f"{name}.json").exists()}
    sft, rl, binary = done.get("eval_sft"), done.get("eval_rl"), done.get("eval_rl_binary")
    report = {
        "benchmark": "learning_signal", "command": args.command, "device": versions().get("device"),
        "versions": versions(), "tasks": sft["tasks"] if sft else None, "k": args.protocol["k"],
        "protocol": args.protocol, "phases": done,
        "sft_pass1": sft and sft["pass1"], "sft_pass1_ci95": sft and sft["pass1_ci95"],
        "sft_cutoff_fraction": sft and sft["cutoff_fraction"],
        "rl_pass1": rl and rl["pass1"], "rl_pass1_ci95": rl and rl["pass1_ci95"],
        "rl_binary_pass1": binary and binary["pass1"], "program_style": args.program_style,
    }
    if sft and rl:
        difference = paired(rl, sft, args.bootstrap)
        report["rl_minus_sft"], report["rl_minus_sft_ci95"] = difference["difference"], difference["ci95"]
    if sft and binary:
        report["rl_binary_minus_sft"] = paired(binary, sft, args.bootstrap)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, report)
    return report


def check_program_style(args) -> None:
    """One --work holds programs of one --program-style: SFT trains on the verify phase's
    programs, so a verify record of another style (earlier records: "table") stops the run."""
    for phase in ("verify", "build"):
        marker = args.work / f"{phase}.json"
        recorded = json.loads(marker.read_text()).get("program_style", "table") if marker.exists() else None
        if recorded not in (None, args.program_style):
            raise SystemExit(f"{marker} holds {recorded!r} programs, not --program-style {args.program_style!r}: "
                             "give this style its own --work")


def main(argv=None) -> dict:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.work.mkdir(parents=True, exist_ok=True)
    check_program_style(args)
    train, evaluation = task_sets(args)
    runners = {"verify": phase_verify, "build": phase_build, "sft": phase_sft, "probe": phase_probe,
               "rl": lambda *a: phase_rl(*a, "dense"), "rl_binary": lambda *a: phase_rl(*a, "binary")}
    for phase in PHASES:
        marker = args.work / f"{phase}.json"
        if phase not in args.phases or marker.exists():
            continue
        if phase.startswith("eval_"):
            run = lambda *a, model=phase[len("eval_"):]: phase_eval(*a, model)  # noqa: E731
        else:
            run = runners[phase]
        record: dict = {}
        result = timed(record, "wall_s", lambda: run(args, train, evaluation))
        atomic_write_json(marker, {**result, **record, "command": args.command})
        print(json.dumps({"phase": phase, **{k: v for k, v in result.items() if k != "per_task"}})[:2000], flush=True)
        write_report(args)
    return write_report(args)


if __name__ == "__main__":
    main()
