# Shared names and helpers: the plan of models, wildcard constraints, job resources.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from chorus.plan import MODEL_KINDS, POOLS, Plan

PLAN = Plan(config)
RESULTS = PLAN.results


wildcard_constraints:
    stage="|".join(PLAN.stages),
    expert="|".join(PLAN.experts),
    merge="|".join(PLAN.merges) or "NO_MERGE",
    kind="|".join(MODEL_KINDS),
    name="[A-Za-z0-9][A-Za-z0-9_.]*",
    pool="|".join(POOLS),
    shard=r"\d+",


def job_resources(kind):
    """Rule resources from config.resources.<kind>; the SLURM profile maps them to sbatch."""
    spec = config["resources"][kind]
    # cpus reach sbatch through the rule's threads (job_threads), which profiles may override
    resources = {"mem_mb": spec["mem_mb"], "runtime": spec["runtime"]}
    if spec.get("gpu", 0):
        resources["gpu"] = spec["gpu"]
    return resources


def job_threads(kind):
    return config["resources"][kind]["cpus"]


def training_launch():
    """How a training job starts: device, DeepSpeed config, ranks (chorus.launch)."""
    return {
        "device": config["device"],
        "deepspeed": config.get("deepspeed"),
        "processes": config.get("train_processes", "auto"),
        "compile_cache": config.get("compile_cache"),
    }


def sft_settings():
    """Batch settings shared by the SFT stages and the consolidation SFT."""
    sft = config["sft"]
    return {
        "batch_size": sft.get("batch_size", 2),
        "grad_accum": sft.get("grad_accum", 1),
        "save_steps": sft.get("save_steps", 200),
        "max_length": config["max_length"],
        "attn": sft.get("attention", "auto"),
        "liger": sft.get("liger_kernel", "auto"),
    }


def task_files():
    """Every file of the task source: editing a task re-runs what depends on it."""
    if config["tasks"]["source"] == "cvdp":
        return [config["tasks"]["cvdp_jsonl"]]
    return sorted(
        str(p) for p in Path(config["tasks"]["root"]).rglob("*") if p.is_file()
    )


def synth_corpus():
    """The synthetic corpus listing when synth is enabled (rules/synth.smk), else none."""
    if config.get("synth", {}).get("enabled", False):
        return [f"{RESULTS}/synth/corpus.json"]
    return []


def model_dir(wildcards):
    return PLAN.model_dir(wildcards.kind, wildcards.name)
