"""The pipeline end to end (the local_run fixture: the embedded default, smaller): every stage
runs and its outputs make sense."""

import json
import re
from pathlib import Path

import pandas as pd
import yaml
import pytest
import torch
from transformers import AutoModelForCausalLM

from chorus.plan import Plan
from chorus.tasks import load_manifest
from conftest import run_snakemake, write_config
from test_workflow_dag import job_counts

pytestmark = pytest.mark.slow


def run_config(workdir: Path) -> dict:
    """The configuration the run in `workdir` was made with."""
    return yaml.safe_load((workdir / "config.yaml").read_text())


def test_tables_cover_every_model_and_test_task(local_run):
    plan = Plan(run_config(local_run))
    results = local_run / "results"
    test_tasks = load_manifest(results / "tasks" / "manifest.json", splits=["test"], root=local_run)
    per_task = pd.read_csv(results / "tables" / "per_task_pass1.csv", index_col="task_id")
    model_ids = [m.id for m in plan.models()]
    assert sorted(per_task.index) == sorted(t.id for t in test_tasks)
    # the tables include the synthetic test tasks the run generated and verified
    assert {t.source for t in test_tasks} == {"shipped", "synthetic"}
    assert list(per_task.columns) == [*model_ids, "oracle/best_expert"]
    assert per_task.to_numpy().min() >= 0 and per_task.to_numpy().max() <= 1

    summary = pd.read_csv(results / "tables" / "summary.csv")
    assert list(summary["model"]) == [*model_ids, "oracle/best_expert"]
    assert (summary["tasks"] == len(test_tasks)).all()
    # the oracle takes the best expert per task, so it is never below any expert
    experts = summary[summary["model"].str.startswith("rl/")]
    oracle = summary[summary["model"] == "oracle/best_expert"].iloc[0]
    assert oracle["pass@1"] >= experts["pass@1"].max()
    # every model's Pass@1 lies in its bootstrap interval; merged and consolidated models
    # (only they) are compared with the best expert and the oracle
    assert ((summary["pass@1_lo"] <= summary["pass@1"]) & (summary["pass@1"] <= summary["pass@1_hi"])).all()
    compared = summary["model"].str.startswith(("merge/", "consolidated/"))
    assert summary.loc[compared, ["vs_best_expert_lo", "vs_oracle_hi"]].notna().all().all()
    assert summary.loc[~compared, "vs_oracle"].isna().all()

    # the study's questions, each a paired comparison of two evaluated models, its
    # difference inside its interval and the verdict the interval gives
    comparisons = pd.read_csv(results / "tables" / "comparisons.csv")
    assert [tuple(row) for row in comparisons[["question", "model"]].to_numpy()] == [
        (question, model) for question, model, _ in plan.comparisons()]
    assert set(comparisons["model"]) | set(comparisons["reference"]) <= {*model_ids, "oracle/best_expert"}
    assert (comparisons["tasks"] == len(test_tasks)).all()
    assert ((comparisons["difference_lo"] <= comparisons["difference"])
            & (comparisons["difference"] <= comparisons["difference_hi"])).all()
    best = comparisons.loc[comparisons["question"] == "consolidation", "reference"]
    assert set(best) == set(summary.loc[compared, "best_expert"])

    per_sample = pd.read_csv(results / "tables" / "per_sample.csv")
    k = plan.config["eval"]["k"]
    counts = per_sample.groupby(["model", "task_id"]).size()
    assert (counts == k).all() and len(counts) == len(model_ids) * len(test_tasks)
    # every sample got a real simulation verdict, with a reason when it failed
    assert per_sample["status"].notna().all()
    assert ((per_sample["score"] >= 0) & (per_sample["score"] <= 1)).all()


def test_every_checkpoint_loads_and_merges_differ(local_run):
    plan = Plan(run_config(local_run))
    weights = {}
    for ref in plan.models():
        model = AutoModelForCausalLM.from_pretrained(local_run / plan.model_dir(ref.kind, ref.name))
        weights[ref.id] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    name = next(iter(weights["rl/easy_dense"]))
    # linear merge of the experts is their average (mergekit, weights equal)
    experts = [weights[f"rl/{e}"] for e in plan.merge_experts("linear")]
    for key in weights["merge/linear"]:
        expected = sum(e[key].float() for e in experts) / len(experts)
        torch.testing.assert_close(weights["merge/linear"][key].float(), expected, rtol=1e-3, atol=1e-3)
    # the SFT stages really trained: their weights differ from their parents
    assert not torch.equal(weights["sft/format"][name], weights["base/base"][name])
    assert not torch.equal(weights["sft/easy"][name], weights["sft/format"][name])
    # the experts ran GRPO for the configured steps, every rollout scored in simulation
    # (the tiny model's rollouts all score 0: no reward variance, so no update is expected)
    config = plan.config
    for expert in plan.experts:
        metrics = json.loads((local_run / plan.model_dir("rl", expert) / "rl_metrics.json").read_text())
        assert metrics["steps"] == config["rl"]["steps"]
        scored = sum(sum(call["statuses"].values()) for call in metrics["reward_calls"])
        assert scored == sum(call["n"] for call in metrics["reward_calls"]) > 0


def test_report_and_benchmarks(local_run, local_run_report):
    html = local_run_report.read_text(errors="replace")
    assert "per_task_heatmap.png" in html and "overview.html" in html
    # every job of the run wrote its benchmark (a header and a measurement) and its log
    jobs = planned_jobs(local_run)
    assert {rule for rule, _, _ in jobs} >= {"prepare_tasks", "sft", "rl", "merge", "score_shard", "plots"}
    for rule, benchmark, logs in jobs:
        if rule == "all":
            continue
        assert benchmark, f"rule {rule} declares no benchmark"
        lines = (local_run / benchmark).read_text().splitlines()
        assert lines[0].startswith("s\th:m:s") and len(lines) >= 2, (rule, benchmark, lines)
        assert logs and all((local_run / log).is_file() for log in logs), (rule, logs)
    # the distillation statistics agree with the data they describe
    consolidate = local_run / "results" / "data" / "consolidate"
    stats = json.loads((consolidate / "distill.stats.json").read_text())
    rows = [json.loads(line) for line in (consolidate / "distill.jsonl").read_text().splitlines()]
    assert set(stats) == {"verified_samples", "tasks_with_verified", "reference_samples", "per_expert"}
    assert sorted(Path(folder).name for folder in stats["per_expert"]) == sorted(Plan(run_config(local_run)).experts)
    assert all(0 <= e["kept"] <= e["passing_samples"] for e in stats["per_expert"].values())
    assert stats["verified_samples"] == sum(e["kept"] for e in stats["per_expert"].values())
    assert stats["verified_samples"] == sum(r["source"] == "verified" for r in rows)
    assert stats["tasks_with_verified"] == len({r["task_id"] for r in rows if r["source"] == "verified"})
    assert stats["reference_samples"] == sum(r["source"] == "reference" for r in rows) > 0  # include_reference
    assert len(rows) == stats["verified_samples"] + stats["reference_samples"]


def planned_jobs(workdir):
    """(rule, benchmark, logs) of every job of the run in `workdir`, from a forced dry-run
    (it lists each job's files as the rules declare them, wildcards filled in)."""
    proc = run_snakemake(["-n", "--forceall", "--directory", str(workdir),
                          "--configfile", str(workdir / "config.yaml")])
    jobs = []
    for block in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) \w+:\n)", proc.stdout + proc.stderr):
        head = re.match(r"(?:local)?(?:rule|checkpoint) (\w+):\n", block)
        if head:
            fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
            logs = [log for log in fields.get("log", "").split(", ") if log]
            jobs.append((head[1], fields.get("benchmark"), logs))
    return jobs


def test_editing_one_merge_reruns_only_that_merge(local_run, tmp_path):
    base = run_config(local_run)
    next(m for m in base["merge"]["strategies"] if m["method"] == "task_arithmetic")["params"]["weight"] = 0.7
    path = write_config(tmp_path / "edited.yaml", base)
    proc = run_snakemake(["-n", "--directory", str(local_run), "--configfile", str(path)])
    counts = job_counts(proc.stdout + proc.stderr)
    shards = base["simulation"]["shards"]
    assert counts == {
        "merge": 1,
        "generate": 1,
        "score_shard": shards,
        "gather_scores": 1,
        "aggregate": 1,
        "report_tables": 1,
        "plots": 1,
        "all": 1,
        "total": 7 + shards,
    }



def snakemake_log_span(workdir: Path, last_rules: tuple[str, ...]) -> float:
    """Seconds from the first job's start to the last of `last_rules` finishing, on the
    scheduler's own clock (the timestamps of the run's .snakemake/log file)."""
    from datetime import datetime

    for log in sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log")):
        text = log.read_text()
        stamps = [(datetime.strptime(m[1], "%a %b %d %H:%M:%S %Y"), m.end()) for m in
                  re.finditer(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]$", text, re.M)]
        ends = [when for when, at in stamps
                if re.match(rf"\s*Finished jobid: \d+ \(Rule: ({'|'.join(last_rules)})\)", text[at:])]
        if ends:
            return (max(ends) - stamps[0][0]).total_seconds()
    raise AssertionError("no log of the run")


def test_publish_writes_run_json(local_run, tmp_path):
    """make experiment-publish's run.json: wall time, device, evaluation size, command and
    per-stage times of the run, from its benchmark files."""
    import shutil
    import subprocess
    import sys

    from conftest import REPO
    from chorus.run_record import REPORT_STAGES, job_times

    out = tmp_path / "run.json"
    subprocess.run([sys.executable, "scripts/publish_run.py", str(local_run / "results"), str(out),
                    "--command", "snakemake --cores 2"], cwd=REPO, check=True)
    record = json.loads(out.read_text())
    plan = Plan(run_config(local_run))
    test_tasks = load_manifest(local_run / plan.results / "tasks" / "manifest.json", splits=plan.config["eval"]["splits"],
                               root=local_run)
    assert record["tasks"] == len(test_tasks) and record["k"] == plan.config["eval"]["k"]
    assert record["models"] == len(plan.models()) and record["command"] == "snakemake --cores 2"
    if shutil.which("nvidia-smi") is None:
        assert record["device"] == "cpu"
    # the wall time agrees with the scheduler's log (1 s timestamps; a job's benchmark
    # starts after its process does, seconds on a loaded machine)
    assert abs(record["wall_s"] - snakemake_log_span(local_run, REPORT_STAGES)) <= 15
    jobs = job_times(local_run / "results" / "benchmarks")
    assert record["jobs"] == len(jobs) == sum(s["jobs"] for s in record["stages"].values())
    assert {"sft", "rl", "merge", "generate", "score", "plots"} <= set(record["stages"])
    for name, stage in record["stages"].items():
        assert stage["longest_s"] <= stage["span_s"] + 0.1 and stage["longest_s"] <= stage["sum_s"] + 0.1, name
        assert 0 <= stage["first_start_s"] <= stage["last_end_s"] <= record["wall_s"] + 0.1, name


def test_prebuild_builds_every_design_of_the_task_set(local_run, tmp_path, monkeypatch):
    """prebuild: one job builds every design of the manifest into the build cache (a
    fresh one here, so nothing the run built before counts)."""
    from chorus.harness.build import build_key

    cache = tmp_path / "verilator"
    monkeypatch.setenv("CHORUS_CACHE_DIR", str(cache))
    config = run_config(local_run)
    config["prebuild"] = True
    path = write_config(tmp_path / "prebuild.yaml", config)
    report = "results/prebuild/designs.json"
    run_snakemake([report, "--cores", "2", "--directory", str(local_run), "--configfile", str(path)])
    tasks = load_manifest(local_run / "results" / "tasks" / "manifest.json", root=local_run)
    designs = {build_key(task) for task in tasks if task.answer_language != "systemverilog"}
    assert json.loads((local_run / report).read_text())["designs"] == len({t.design_hash() for t in tasks})
    assert designs and all((cache / key / "BUILD_OK").exists() for key in designs)
    # the RL experts wait for it
    proc = run_snakemake(["-n", "--forceall", "--directory", str(local_run), "--configfile", str(path)])
    rl_blocks = [b for b in re.split(r"\n(?=(?:local)?rule \w+:\n)", proc.stdout) if b.startswith("rule rl:")]
    assert rl_blocks and all(report in block.split("output:")[0] for block in rl_blocks)
