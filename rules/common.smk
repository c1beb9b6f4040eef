# Shared names and helpers: the checked config, the plan of models, wildcard constraints,
# job resources and the input functions the rules share.
import re
import sys
from pathlib import Path

SRC = str(Path(workflow.basedir) / "src")
sys.path.insert(0, SRC)

from chorus.io import prepend_pythonpath

# the jobs' scripts (also in --sdm conda envs, which hold only third-party packages)
# import chorus from this checkout
prepend_pythonpath(SRC)

from snakemake.exceptions import WorkflowError

from chorus.config import ConfigError, check_config
from chorus.plan import MODEL_KINDS, POOLS, Plan

try:
    # fills the schema's defaults into config: the only place defaults come from
    check_config(config)
except ConfigError as error:
    raise WorkflowError(str(error)) from None

PLAN = Plan(config)
RESULTS = PLAN.results


def one_of(names):
    return "|".join(re.escape(n) for n in names)


wildcard_constraints:
    stage=one_of(PLAN.stages),
    expert=one_of(PLAN.expert_replicas),
    merge=one_of(PLAN.merges) or "NO_MERGE",
    kind=one_of(MODEL_KINDS),
    name="[A-Za-z0-9][A-Za-z0-9_.]*",
    pool=one_of(POOLS),
    shard=r"\d+",


def job_resources(kind):
    """Rule resources from config.resources.<kind>, the one source of them (the SLURM
    profile sets only account and CPU partition). Memory and runtime grow with each
    retry (attempt 1, 2, ...), so a job killed for either gets more the next time."""
    spec = config["resources"][kind]
    resources = {
        "mem_mb": lambda wildcards, attempt: spec["mem_mb"] * attempt,
        "runtime": lambda wildcards, attempt: spec["runtime"] * attempt,
    }
    if spec["gpu"]:
        resources["gpu"] = spec["gpu"]
    if spec["partition"]:
        resources["slurm_partition"] = spec["partition"]
    return resources


def job_threads(kind):
    return config["resources"][kind]["cpus"]


def training_launch():
    """How a training job starts (chorus.launch): settings that change the result.
    compile_cache (a cache folder) is read by the scripts from the config instead, so
    moving it re-runs nothing."""
    return {
        "device": config["device"],
        "deepspeed": config["deepspeed"],
        "processes": config["train_processes"],
    }


def sft_settings():
    """Batch settings shared by the SFT stages and the consolidation SFT. save_steps
    (the checkpoint interval) is not among them: it changes no result, so the scripts
    read it from the config and editing it re-runs nothing."""
    sft = config["sft"]
    return {
        "batch_size": sft["batch_size"],
        "grad_accum": sft["grad_accum"],
        "max_length": config["max_length"],
        "attn": sft["attention"],
        "liger": sft["liger_kernel"],
        "compile_min_flops": sft["compile_min_flops"],
    }


def sandbox_limits():
    """The per-candidate simulation limits, per-task timeouts included (they can change a score); simulation.shards
    only splits the work and is no param of the training or generation rules."""
    keys = (
        "timeout_s",
        "mem_mb",
        "build_timeout_s",
        "timeout_factor",
        "timeout_floor_s",
    )
    return {k: config["simulation"][k] for k in keys}


def sampling_settings():
    """Generation settings of the eval pool (pass_at, include_base: report only)."""
    return {
        k: config["eval"][k]
        for k in ("temperature", "top_p", "max_new_tokens", "sampler")
    }


def harvest_settings():
    """What decides the harvest pool's scored samples besides the experts: the rules that
    use them with ancient() inputs take these as params instead."""
    return {
        "pool": pool_settings("harvest"),
        "sampling": sampling_settings(),
        "seeds": {e: PLAN.eval_seed("rl", e) for e in PLAN.experts},
        "limits": sandbox_limits(),
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
    if config["synth"]["enabled"]:
        return [f"{RESULTS}/synth/corpus.json"]
    return []


def model_dir(wildcards):
    return PLAN.model_dir(wildcards.kind, wildcards.name)


def sft_input_model(wildcards):
    """A stage starts from the previous stage's checkpoint, the first from the base."""
    previous = PLAN.previous_stage(wildcards.stage)
    if previous is None:
        return PLAN.model_dir("base", "base")
    return PLAN.model_dir("sft", previous)


def pool_settings(pool):
    """Splits and samples per task: eval samples the held-out splits, harvest the
    train tasks for distillation."""
    if pool == "eval":
        return {"splits": config["eval"]["splits"], "k": config["eval"]["k"]}
    return {"splits": ["train"], "k": config["consolidate"]["samples_per_task"]}
