# Shared names: the checked config, its plan (chorus.plan.Plan: models, paths and the
# settings of every job), wildcard constraints, and every input function of the rules.
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

from chorus.config import ConfigError
from chorus.plan import MODEL_KINDS, POOLS, checked_plan
from chorus.rounds import round_dir

try:
    # fills the schema's defaults into config (the only place defaults come from) and
    # checks it: the one Plan of this workflow run
    PLAN = checked_plan(config)
except ConfigError as error:
    raise WorkflowError(str(error)) from None

RESULTS = PLAN.results
# a model's files in an evaluation pool, as a wildcard template
POOL_DIR = PLAN.pool_dir()


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
    round=r"[2-9]|[1-9]\d+",  # coverage-closure rounds after the first


# -- inputs that do not depend on wildcards ----------------------------------------------
def task_files():
    """Every file of the task source: editing a task re-runs what depends on it."""
    if config["tasks"]["source"] == "cvdp":
        return [config["tasks"]["cvdp_jsonl"]]
    return sorted(
        str(p) for p in Path(config["tasks"]["root"]).rglob("*") if p.is_file()
    )


def prebuilt_designs():
    """The prebuild job's report when config prebuild builds every design first, else none."""
    if config["prebuild"]:
        return [f"{RESULTS}/prebuild/designs.json"]
    return []


def synth_corpus():
    """The synthetic corpus listing when synth is enabled (rules/synth.smk), else none."""
    if config["synth"]["enabled"]:
        return [rules.synth_corpus.output.corpus]
    return []


# -- input functions (wildcards -> the files a job reads) --------------------------------
def model_dir(wildcards):
    return PLAN.model_dir(wildcards.kind, wildcards.name)


def sft_input_model(wildcards):
    """A stage starts from the previous stage's checkpoint, the first from the base."""
    previous = PLAN.previous_stage(wildcards.stage)
    if previous is None:
        return PLAN.model_dir("base", "base")
    return PLAN.model_dir("sft", previous)


def expert_input_model(wildcards):
    """An RL expert starts from the SFT stage it names."""
    return PLAN.model_dir("sft", PLAN.expert(wildcards.expert)["from_stage"])


def merged_experts(wildcards):
    return [PLAN.model_dir("rl", e) for e in PLAN.merge_experts(wildcards.merge)]


def merge_base_model(wildcards):
    """The SFT checkpoint the merge takes task vectors against."""
    return PLAN.model_dir("sft", PLAN.merge_base_stage(wildcards.merge))


def score_shards(wildcards):
    """Every score shard of one model in one pool."""
    pool_dir = PLAN.pool_dir(wildcards.pool, wildcards.kind, wildcards.name)
    return [f"{pool_dir}/scores/shard{shard}.jsonl" for shard in PLAN.shards()]


def round_inputs(pool, kind, name, rounds):
    """Generations and score shards of rounds 1..`rounds` of one model in one pool
    (docs/rounds.md)."""
    folders = [
        round_dir(PLAN.pool_dir(pool, kind, name), r) for r in range(1, rounds + 1)
    ]
    return {
        "generations": [f"{folder}/generations.jsonl" for folder in folders],
        "shards": [
            f"{folder}/scores/shard{shard}.jsonl"
            for folder in folders
            for shard in PLAN.shards()
        ],
    }


def earlier_round_inputs(wildcards):
    """The generations and score shards of the rounds before round `wildcards.round`."""
    return round_inputs(
        wildcards.pool, wildcards.kind, wildcards.name, int(wildcards.round) - 1
    )


def eval_round_inputs(wildcards):
    """Every round's generations and score shards of one model in the eval pool."""
    return round_inputs(
        "eval", wildcards.kind, wildcards.name, config["eval"]["rounds"]
    )


def round_plots():
    """The rounds plot of the report, when the evaluation has rounds."""
    return (
        [f"{RESULTS}/plots/pass1_by_round.png"] if config["eval"]["rounds"] > 1 else []
    )
