"""`make experiment` on one GPU node: the command it runs, and the jobs that command plans
(profiles/gpu-node: the GPU shared by its memory, the cores by what jobs use; prebuild)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from conftest import REPO, run_snakemake
from test_workflow_dag import job_counts

pytestmark = pytest.mark.slow  # workflow dry-runs

PROFILE = yaml.safe_load((REPO / "profiles" / "gpu-node" / "config.yaml").read_text())
H100_GIB = 79  # nvidia-smi's memory.total of an H100 80GB HBM3 (81559 MiB), as GPU_MEM_GB takes it


def planned_jobs(output: str) -> list[dict]:
    """rule, input, threads and resources of every job of a dry run's listing."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", output):
        head = re.match(r"(?:local)?rule (\w+):\n", block)
        if head:
            fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
            resources = dict(item.split("=", 1) for item in fields.get("resources", "").split(", ") if "=" in item)
            jobs.append({"rule": head[1], "input": fields.get("input", ""), "threads": int(fields.get("threads", 1)),
                         "resources": resources, "wildcards": fields.get("wildcards", ""),
                         "first": fields.get("priority") == "highest"})
    return jobs


def experiment_command(*make_args: str) -> list[str]:
    """The snakemake arguments `make experiment` runs (as `make -n` prints them)."""
    printed = subprocess.run(["make", "-n", "-o", "setup", "experiment", "GPU_MEM_GB=79", *make_args], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
    line = next(line for line in printed.splitlines() if "snakemake" in line)
    return line.split()[1:]


def planned_by_rule(args: list[str], cwd) -> dict[str, list[dict]]:
    """The jobs of a dry run of `make experiment`'s arguments on the lent machine's 16 cores."""
    args = [str(REPO / a) if a.startswith(("config/", "profiles/")) else a for a in args]
    args[args.index("all")] = "16"
    proc = run_snakemake(["-n", "--nolock", "--forceall", *args], cwd=cwd)
    by_rule: dict[str, list[dict]] = {}
    for job in planned_jobs(proc.stdout + proc.stderr):
        by_rule.setdefault(job["rule"], []).append(job)
    return by_rule


def test_make_experiment_shares_one_gpu_by_memory(tmp_path):
    args = experiment_command()
    assert args[args.index("--profile") + 1] == "profiles/gpu-node" and "gpu_mem_gb=79" in args
    by_rule = planned_by_rule(args, tmp_path)
    gpu_mem = {rule: int(values["gpu_mem_gb"]) for rule, values in PROFILE["set-resources"].items()}
    for rule, memory in gpu_mem.items():
        for job in by_rule.get(rule, []):
            assert int(job["resources"]["gpu_mem_gb"]) == memory, (rule, job["resources"])
            assert job["threads"] == PROFILE["set-threads"][rule], (rule, job["threads"])
    assert {"sft", "rl", "generate", "merge", "consolidate_sft"} <= set(by_rule) & set(gpu_mem)
    # on an H100: training alone, two evaluations at once, never an evaluation beside training
    assert 2 * gpu_mem["generate"] <= H100_GIB < 3 * gpu_mem["generate"]
    assert gpu_mem["sft"] + gpu_mem["generate"] > H100_GIB and gpu_mem["rl"] + gpu_mem["generate"] > H100_GIB
    # every design built once, beside SFT, before the first expert
    assert len(by_rule["prebuild"]) == 1 and by_rule["prebuild"][0]["threads"] == PROFILE["set-threads"]["prebuild"]
    assert by_rule["preflight"][0]["threads"] == PROFILE["set-threads"]["preflight"] > 8  # SFT waits for it
    assert all("prebuild/designs.json" in job["input"] for job in by_rule["rl"])
    # the distilled model's chain goes first; the evaluations fill the GPU around it
    chain = ["preflight", "prebuild", "sft", "rl", "consolidate_sft"]
    assert all(job["first"] for rule in chain for job in by_rule[rule])
    assert all(job["first"] == ("pool=harvest" in job["wildcards"]) for job in by_rule["generate"])


def test_a_measured_expert_memory_sizes_only_the_rl_jobs(tmp_path):
    """benchmarks/device/rl_memory.py: an rl_loop report's peak sets the RL rules'
    gpu_mem_gb (peak x 1.15 + 2) through make's SNAKEMAKE_TARGETS; every other GPU rule
    keeps the profile's value (on the command line --set-resources replaces the profile's
    whole list); the measurement's shape is the experiment's rollout batch."""
    import json
    import sys

    tool = [sys.executable, str(REPO / "benchmarks" / "device" / "rl_memory.py")]
    shape = subprocess.run([*tool, "shape", "smollm2_h200"], capture_output=True, text=True, check=True).stdout.split()
    rl = yaml.safe_load((REPO / "config" / "experiments" / "smollm2_h200.yaml").read_text())["rl"]
    value = dict(zip(shape[::2], map(int, shape[1::2])))
    assert value["--grpo-tasks"] * value["--grpo-generations"] == rl["batch_size"] * rl["grad_accum"]
    assert value["--grpo-steps-per-generation"] == rl["steps_per_generation"]
    report = tmp_path / "rl_memory.json"
    report.write_text(json.dumps({"details": {"grpo_batch16a2x32": {"static": {"peak_gpu_allocated_gib": 20.0}}}}))
    resources = subprocess.run([*tool, "resources", str(report)], capture_output=True, text=True,
                               check=True).stdout.strip()
    by_rule = planned_by_rule(experiment_command(f"SNAKEMAKE_TARGETS={resources}"), tmp_path)
    expected = {rule: int(values["gpu_mem_gb"]) for rule, values in PROFILE["set-resources"].items()}
    expected.update(rl=25, consolidate_rl=25)
    assert {"rl", "sft", "generate"} <= set(by_rule)
    for rule, memory in expected.items():
        assert all(int(job["resources"]["gpu_mem_gb"]) == memory for job in by_rule.get(rule, [])), rule


def test_every_gpu_rule_states_its_gpu_memory():
    """A GPU rule the profile does not size would take no share of the GPU and could run
    beside training (eval.rounds' generate_round, planned only when rounds > 1)."""
    gpu_rules = set()
    for path in (REPO / "rules").glob("*.smk"):
        for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", path.read_text(), re.M | re.S):
            if re.search(r'PLAN\.resources\("(gpu_job|rl_job)"\)', body):
                gpu_rules.add(rule)
    assert {"sft", "rl", "generate", "generate_round", "merge"} <= gpu_rules
    assert gpu_rules <= set(PROFILE["set-resources"]) and gpu_rules <= set(PROFILE["set-threads"])


def test_the_embedded_default_plans_no_prebuild(tmp_path):
    """prebuild is off by default: `make run` gets no new job and RL no new input."""
    from conftest import default_config, write_config

    config = default_config()
    config["tasks"]["root"] = str(REPO / config["tasks"]["root"])
    proc = run_snakemake(["-n", "--nolock", "--forceall", "--configfile", str(write_config(tmp_path / "c.yaml", config))],
                         cwd=tmp_path)
    counts = job_counts(proc.stdout + proc.stderr)
    assert "prebuild" not in counts and counts["rl"] >= 1
    assert all("prebuild" not in job["input"] for job in planned_jobs(proc.stdout + proc.stderr))


def test_the_rehearsal_runs_the_reproduction_end_to_end(tmp_path):
    """`make experiment-rehearsal`: the reproduction's plan, profile and configuration at
    benchmarks/device/rehearsal.yaml's sizes, on the CPU. Every model of the experiment is
    evaluated on every task k times, the study's comparisons are tabled, the experts start
    from their stages with their rewards, and distillation from its base stage; the
    scheduler never falls back."""
    import csv
    import json

    from chorus.plan import Plan
    from chorus.report import BEST_EXPERT
    from conftest import experiment_config, write_config

    printed = subprocess.run(["make", "-n", "-o", "setup", "experiment-rehearsal"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.replace("\\\n", " ")
    args = next(line for line in printed.splitlines() if "snakemake" in line).split()[1:]
    args = [str(REPO / a) if a.startswith(("config/", "profiles/", "benchmarks/")) else a for a in args]
    tasks = write_config(tmp_path / "tasks.yaml", {"tasks": {"root": str(REPO / "tasks" / "ecov")}})
    run = run_snakemake([*args, str(tasks), "--directory", str(tmp_path)], timeout=1500)
    # the profile's scheduler takes prioritize's priorities as they are (no ILP fallback)
    assert "Failed to solve scheduling problem" not in run.stderr + run.stdout

    rehearsal = yaml.safe_load((REPO / "benchmarks" / "device" / "rehearsal.yaml").read_text())
    config = experiment_config()
    plan = Plan(config)
    results = tmp_path / "results" / rehearsal["run_name"]
    rows = {row["model"]: row for row in csv.DictReader((results / "tables" / "summary.csv").open())}
    k = config["eval"]["k"]
    for model in plan.models():
        assert int(rows[model.id]["samples"]) == k * int(rows[model.id]["tasks"]) > 0, model.id
    comparisons = [(r["question"], r["model"], r["reference"]) for r in
                   csv.DictReader((results / "tables" / "comparisons.csv").open())]
    best = rows["merge/linear"]["best_expert"]
    assert comparisons == [(q, m, best if r == BEST_EXPERT else r) for q, m, r in plan.comparisons()]
    for expert in config["rl"]["experts"]:
        metrics = json.loads((results / "models" / "rl" / expert["name"] / "rl_metrics.json").read_text())
        assert metrics["model_in"].endswith(f"models/sft/{expert['from_stage']}") and metrics["steps"] >= 1
        assert metrics["reward_mode"] == expert["reward"]
    distill = json.loads((results / "models" / "consolidated" / "distill" / "train_metrics.json").read_text())
    assert distill["model_in"].endswith(f"models/sft/{config['consolidate']['base_stage']}")
    assert json.loads((results / "prebuild" / "designs.json").read_text())["designs"] > 0
