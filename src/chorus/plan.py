"""The workflow's plan: the config turned into models, paths and job settings.

The Snakefile and its rules ask this module for names, paths and the settings of each job
(threads, resources, params), and the job scripts ask it for the settings they read at
run time, so the job graph (SFT stages x RL experts x merge strategies x evaluated models)
and what each job is given are defined in one place. Checks that a JSON schema cannot
express (cross references between sections) live here too, so a bad config fails at
start-up with a message naming the key.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass

from chorus.config import ConfigError, check_config, fill_defaults
from chorus.merge import METHODS
from chorus.modeling import GGUF_PRESETS, is_preset

MODEL_KINDS = ("base", "sft", "rl", "merge", "consolidated")
POOLS = ("eval", "harvest")  # eval: held-out evaluation; harvest: train-task samples for distillation


@dataclass(frozen=True)
class ModelRef:
    kind: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.kind}/{self.name}"


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"{what}: duplicate name {name!r}")
        seen.add(name)


REPLICA = re.compile(r"^(?P<expert>.+)\.seed(?P<seed>\d+)$")

# Settings that change no result (the checkpoint interval, the compile cache, the
# simulation's niceness): never in a rule's params, so editing them re-runs nothing. The
# job reads them from the config at run time: job_settings adds them to the params of
# the same name. params name -> (config section, None for the top level; its keys).
RUN_TIME_SETTINGS = {
    "stage": ("sft", ("save_steps",)),
    "expert": ("rl", ("save_steps",)),
    "simulation": ("simulation", ("nice",)),
    "launch": (None, ("compile_cache",)),
}
# Settings added after runs were made, null by default: left out of a job's params while
# null, so that those runs keep their params and re-run nothing; job_settings puts the
# null back, so a job reads every key of its section. params name -> keys.
ADDED_LATER = {
    "expert": ("steps_per_generation", "rounds", "top_p", "grad_accum", "time_budget_s"),
    "sampling": ("batch_size",),
}


def without_unset(settings: dict, params: str) -> dict:
    """`settings` without the ADDED_LATER keys of `params` whose value is None."""
    added = ADDED_LATER.get(params, ())
    return {k: v for k, v in settings.items() if not (k in added and v is None)}


def job_settings(params, config: dict) -> dict:
    """A workflow job's settings, by params name: its rule's params (what changes its
    result), each completed with the run-time settings of its config section
    (RUN_TIME_SETTINGS, read from the checked `config`) and the nulls left out of it
    (ADDED_LATER). `params`: the script's snakemake.params; `config`: snakemake.config."""
    settings = {}
    for name, value in dict(params).items():
        if isinstance(value, dict):
            section, keys = RUN_TIME_SETTINGS.get(name, (None, ()))
            source = config[section] if section else config
            value = {**{k: None for k in ADDED_LATER.get(name, ())}, **value, **{k: source[k] for k in keys}}
        settings[name] = value
    return settings


def checked_plan(config: dict) -> "Plan":
    """The workflow's plan of `config`, which is first completed with the schema's
    defaults and checked (chorus.config.check_config); raises ConfigError."""
    return Plan(check_config(config))


def replica_group(model_id: str) -> str:
    """The model a seed replicate repeats: rl/easy_dense.seed1 -> rl/easy_dense."""
    match = REPLICA.match(model_id)
    return match["expert"] if match else model_id


def check_merge_method(key: str, name: str, experts: int, params: dict) -> None:
    """A merge strategy against the method's row of chorus.merge.METHODS: a known method,
    the number of experts it merges, only params it reads."""
    method = METHODS.get(name)
    if method is None:
        near = difflib.get_close_matches(name, METHODS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(f"invalid config at {key}.method: {name!r} is none of {', '.join(METHODS)}{hint}")
    if method.models is not None and experts != method.models:
        raise ConfigError(f"{key}: {name} merges exactly {method.models} experts, got {experts}")
    unread = [p for p in params if p not in method.params]
    if unread:
        raise ConfigError(f"invalid config at {key}.params: {name} reads no {unread} (it reads {list(method.params)})")


def check_model_base(base: str | None) -> None:
    """model.base: null (the tiny model), a preset, or a readable Hugging Face model
    folder (its config.json); else ConfigError naming the key, before any job starts."""
    if not base or is_preset(base):
        return
    if os.sep not in base and not os.path.exists(base):
        raise ConfigError(f"model.base: {base!r} is neither a preset ({', '.join(GGUF_PRESETS)}) nor a model folder")
    config_json = os.path.join(base, "config.json")
    if not os.path.isdir(base):
        raise ConfigError(f"model.base: {base!r} is no model folder (not found)")
    if not os.path.isfile(config_json):
        raise ConfigError(f"model.base: {base!r} has no config.json (not a Hugging Face model folder)")
    if not os.access(base, os.R_OK | os.X_OK) or not os.access(config_json, os.R_OK):
        raise ConfigError(f"model.base: {base!r} is not readable")


class Plan:
    """The plan of a config; the schema's defaults are filled into it first (the workflow
    has chorus.config.check_config do that and validate)."""

    def __init__(self, config: dict):
        self.config = fill_defaults(config)
        self.results = f"results/{config['run_name']}" if config.get("run_name") else "results"
        self.stages = [s["name"] for s in config["sft"]["stages"]]
        self.experts = [e["name"] for e in config["rl"]["experts"]]
        self.merges = [m["name"] for m in config["merge"]["strategies"]]
        self.seeds = list(config.get("seeds", [0]))
        self.check()

    # -- validation beyond the schema -------------------------------------------------
    def check(self) -> None:
        _unique(self.stages, "sft.stages")
        _unique(self.experts, "rl.experts")
        _unique(self.merges, "merge.strategies")
        for i, name in enumerate(self.experts):
            if REPLICA.match(name):
                raise ConfigError(f"rl.experts[{i}].name: {name!r} ends like a seed replicate (.seed<N>)")
        for i, expert in enumerate(self.config["rl"]["experts"]):
            if expert["from_stage"] not in self.stages:
                raise ConfigError(
                    f"rl.experts[{i}].from_stage: {expert['from_stage']!r} is not an "
                    f"sft stage (stages: {', '.join(self.stages)})"
                )
        for i, merge in enumerate(self.config["merge"]["strategies"]):
            experts = self.merge_experts(merge["name"])
            unknown = [e for e in experts if e not in self.experts]
            if unknown:
                raise ConfigError(
                    f"merge.strategies[{i}].experts: unknown expert(s) {unknown} "
                    f"(experts: {', '.join(self.experts)})"
                )
            if len(experts) < 2:
                raise ConfigError(f"merge.strategies[{i}]: needs at least two experts")
            check_merge_method(f"merge.strategies[{i}]", merge["method"], len(experts), merge["params"])
            base_stage = merge.get("base_stage")
            if base_stage is not None and base_stage not in self.stages:
                raise ConfigError(f"merge.strategies[{i}].base_stage: unknown stage {base_stage!r}")
        check_model_base(self.config["model"]["base"])
        if self.consolidate_enabled and self.consolidate_base_stage not in self.stages:
            raise ConfigError(
                f"consolidate.base_stage: {self.consolidate_base_stage!r} is not an sft stage"
            )
        if self.config["synth"]["enabled"]:
            from chorus.synth.corpus import split_families

            try:
                split_families(self.config["synth"])
            except ValueError as error:
                raise ConfigError(f"synth.families: {error}") from None

    # -- lookups ----------------------------------------------------------------------
    def stage(self, name: str) -> dict:
        """The stage's settings; its `seed` defaults to sft.seed."""
        spec = next(s for s in self.config["sft"]["stages"] if s["name"] == name)
        return {"seed": self.config["sft"]["seed"], **spec}

    def previous_stage(self, name: str) -> str | None:
        index = self.stages.index(name)
        return self.stages[index - 1] if index else None

    def expert(self, name: str) -> dict:
        """An expert's GRPO settings: the shared `rl` values under its own, its seed raised
        by its replicate seed: seeds[0] for the expert itself (plain name), s for the
        replicate `<expert>.seed<s>` of each further seed."""
        rl = self.config["rl"]
        match = REPLICA.match(name)
        base = match["expert"] if match else name
        spec = next(e for e in rl["experts"] if e["name"] == base)
        run_time = RUN_TIME_SETTINGS["expert"][1]
        shared = {k: v for k, v in rl.items() if k != "experts" and k not in run_time}
        settings = without_unset({**shared, **spec}, "expert")
        settings.update(name=name, seed=settings["seed"] + self.replicate_seed("rl", name))
        return settings

    def replicate_seed(self, kind: str, name: str) -> int:
        """The seed-replicate offset of a model: s for rl/<expert>.seed<s>, seeds[0] for
        rl/<expert>, 0 for models that are not repeated per seed."""
        if kind != "rl":
            return 0
        match = REPLICA.match(name)
        return int(match["seed"]) if match else self.seeds[0]

    @property
    def expert_replicas(self) -> list[str]:
        """Every RL model trained: the experts, then their repeats for seeds[1:]."""
        return self.experts + [f"{e}.seed{s}" for s in self.seeds[1:] for e in self.experts]

    def eval_seed(self, kind: str, name: str) -> int:
        """Sampling seed of a model's evaluation (and harvest): eval.seed, raised by the
        replicate seed like the expert's training seed, so each replicate is a fresh draw."""
        return self.config["eval"]["seed"] + self.replicate_seed(kind, name)

    def merge(self, name: str) -> dict:
        return next(m for m in self.config["merge"]["strategies"] if m["name"] == name)

    def merge_experts(self, name: str) -> list[str]:
        experts = self.merge(name)["experts"]
        return list(self.experts) if experts == "all" else list(experts)

    def merge_base_stage(self, name: str) -> str:
        """SFT checkpoint used as the merge's base model (task vectors are taken against it)."""
        merge = self.merge(name)
        if merge.get("base_stage"):
            return merge["base_stage"]
        stages = [self.expert(e)["from_stage"] for e in self.merge_experts(name)]
        # the latest stage any of the merged experts started from
        return max(stages, key=self.stages.index)

    @property
    def consolidate_enabled(self) -> bool:
        return self.config["consolidate"]["enabled"]

    @property
    def consolidate_base_stage(self) -> str:
        """SFT checkpoint the distilled model starts from (default: the last stage)."""
        return self.config["consolidate"]["base_stage"] or self.stages[-1]

    @property
    def distilled(self) -> str:
        """Name of the distilled model (consolidate.name); its RL follow-up: <name>_rl."""
        return self.config["consolidate"]["name"]

    @property
    def consolidated_names(self) -> list[str]:
        if not self.consolidate_enabled:
            return []
        names = [self.distilled]
        if self.config["consolidate"]["rl_after"]:
            names.append(f"{self.distilled}_rl")
        return names

    @property
    def expert_ids(self) -> list[str]:
        """The configured experts as model ids (rl/<expert>): the report's expert columns."""
        return [ModelRef("rl", e).id for e in self.experts]

    # -- models and their paths -------------------------------------------------------
    def models(self) -> list[ModelRef]:
        """Every model the workflow evaluates."""
        refs = []
        if self.config["eval"]["include_base"]:
            refs.append(ModelRef("base", "base"))
        refs += [ModelRef("sft", s) for s in self.stages]
        refs += [ModelRef("rl", e) for e in self.expert_replicas]
        refs += [ModelRef("merge", m) for m in self.merges]
        refs += [ModelRef("consolidated", c) for c in self.consolidated_names]
        return refs

    def comparisons(self) -> list[tuple[str, str, str]]:
        """The paired comparisons the study's three questions rest on, as (question, model,
        reference) model ids, for chorus.report.comparison_table. "stage": each SFT stage
        against the model it starts from (the first against the base model when that is
        evaluated), each expert against its SFT stage; "reward": each dense expert against
        the binary one trained from the same stage; "complementarity": the oracle row
        against the best expert; "consolidation": each merged and distilled model against
        the best expert (BEST_EXPERT: which expert that is, the results decide)."""
        from chorus.report import BEST_EXPERT, ORACLE

        pairs = []
        previous = ModelRef("base", "base").id if self.config["eval"]["include_base"] else None
        for stage in self.stages:
            if previous:
                pairs.append(("stage", ModelRef("sft", stage).id, previous))
            previous = ModelRef("sft", stage).id
        experts = [self.expert(e) for e in self.experts]
        pairs += [("stage", ModelRef("rl", e["name"]).id, ModelRef("sft", e["from_stage"]).id) for e in experts]
        pairs += [("reward", ModelRef("rl", dense["name"]).id, ModelRef("rl", binary["name"]).id)
                  for binary in experts if binary["reward"] == "binary"
                  for dense in experts if dense["reward"] == "dense" and dense["from_stage"] == binary["from_stage"]]
        if experts:
            pairs.append(("complementarity", ORACLE, BEST_EXPERT))
            pairs += [("consolidation", ModelRef(kind, name).id, BEST_EXPERT)
                      for kind, names in (("merge", self.merges), ("consolidated", self.consolidated_names))
                      for name in names]
        return pairs

    def harvested(self) -> list[ModelRef]:
        """The models the harvest pool samples for distillation: the configured experts."""
        return [ModelRef("rl", e) for e in self.experts]

    def model_dir(self, kind: str, name: str) -> str:
        """A model's folder, <results>/models/<kind>/<name>; a name "{wildcard}" gives the
        rule's path template. The base model: a local folder as configured, else the
        folder the build_base_model rule writes."""
        if kind == "base":
            external = self.config["model"]["base"]
            # null (the tiny model) and presets are built by the build_base_model rule
            return external if external and not is_preset(external) else self.built_base_dir
        if kind not in MODEL_KINDS:
            raise ConfigError(f"unknown model kind {kind!r}")
        return f"{self.results}/models/{kind}/{name}"

    @property
    def built_base_dir(self) -> str:
        """Where build_base_model writes the tiny model or the converted preset."""
        return f"{self.results}/models/base"

    @property
    def converted_tasks_dir(self) -> str:
        """Where prepare_tasks writes the task folders converted from a CVDP JSONL."""
        return f"{self.results}/tasks/cvdp"

    def pool_dir(self, pool: str = "{pool}", kind: str = "{kind}", name: str = "{name}") -> str:
        """A model's samples, score shards and per-sample table in one pool (POOLS):
        <results>/<pool>/<kind>/<name>, e.g. results/eval/rl/easy_dense. Without
        arguments: the wildcard template of the evaluation rules."""
        return f"{self.results}/{pool}/{kind}/{name}"

    def pool_files(self, pool: str, models: list[ModelRef], file: str) -> list[str]:
        """One file (per_sample.csv, generations.jsonl) of each model in a pool."""
        return [f"{self.pool_dir(pool, m.kind, m.name)}/{file}" for m in models]

    def shards(self) -> list[int]:
        return list(range(self.config["simulation"]["shards"]))

    def synth_shards(self) -> list[int]:
        return list(range(self.config["synth"]["shards"]))

    # -- job settings -----------------------------------------------------------------
    # Rule params hold only settings that change a job's result: Snakemake re-runs a job
    # whose params changed. Settings that change none (RUN_TIME_SETTINGS) the job adds
    # at run time through job_settings; job sizes are threads and resources.
    def threads(self, job: str) -> int:
        """CPUs of a job of size config.resources.<job> (gpu_job, rl_job, sim_job, light_job)."""
        return self.config["resources"][job]["cpus"]

    def resources(self, job: str) -> dict:
        """Rule resources from config.resources.<job>, the one source of them (the SLURM
        profile sets only account and CPU partition). Memory and runtime grow with each
        retry (Snakemake's attempt 1, 2, ...), so a job killed for either gets more the
        next time."""
        spec = self.config["resources"][job]
        resources = {
            "mem_mb": lambda wildcards, attempt: spec["mem_mb"] * attempt,
            "runtime": lambda wildcards, attempt: spec["runtime"] * attempt,
        }
        if spec["gpu"]:
            resources["gpu"] = spec["gpu"]
        if spec["partition"]:
            resources["slurm_partition"] = spec["partition"]
        return resources

    @property
    def base_model_job(self) -> str:
        """Size of the build_base_model job: converting a preset holds the dequantized
        model (Gemma-3-270M: 3.3 GB peak), building the tiny model is small."""
        return "sim_job" if self.config["model"]["base"] else "light_job"

    def launch(self) -> dict:
        """How a training job starts (chorus.launch): the settings that change its result
        (the compile cache comes at run time: RUN_TIME_SETTINGS)."""
        return {
            "device": self.config["device"],
            "deepspeed": self.config["deepspeed"],
            "processes": self.config["train_processes"],
        }

    def sft_settings(self) -> dict:
        """Batch and kernel settings shared by the SFT stages and the consolidation SFT.
        `attn` and `liger` (sft.attention, sft.liger_kernel) keep the names that runs made
        before recorded in their params, so those runs re-run nothing."""
        sft = self.config["sft"]
        return {
            "batch_size": sft["batch_size"],
            "grad_accum": sft["grad_accum"],
            "max_length": self.config["max_length"],
            "attn": sft["attention"],
            "liger": sft["liger_kernel"],
            "compile_min_flops": sft["compile_min_flops"],
        }

    def distill_stage(self) -> dict:
        """The consolidation SFT's stage settings (a stage like sft.stages' own)."""
        consolidate = self.config["consolidate"]
        return {
            "name": self.distilled,
            "epochs": consolidate["epochs"],
            "lr": consolidate["lr"],
            "seed": self.config["sft"]["seed"],
        }

    def distill_rl_expert(self) -> dict:
        """The RL after distillation: the first expert's GRPO settings, its own name."""
        return {**self.expert(self.experts[0]), "name": f"{self.distilled}_rl"}

    def simulation(self) -> dict:
        """config `simulation` as the params of a job that simulates: the per-candidate
        limits, per-task timeouts included (they can change a score). simulation.shards
        only splits the work (the rules' shards) and simulation.nice only schedules it
        (RUN_TIME_SETTINGS)."""
        keys = ("timeout_s", "mem_mb", "build_timeout_s", "timeout_factor", "timeout_floor_s")
        return {k: self.config["simulation"][k] for k in keys}

    def sampling(self) -> dict:
        """Generation settings of the pools (pass_at, include_base: report only); the batch
        size only when set (ADDED_LATER)."""
        keys = ("temperature", "top_p", "max_new_tokens", "sampler", *ADDED_LATER["sampling"])
        return without_unset({k: self.config["eval"][k] for k in keys}, "sampling")

    def pool(self, pool: str) -> dict:
        """Splits and samples per task: eval samples the held-out splits, harvest the
        train tasks for distillation."""
        if pool == "eval":
            return {"splits": self.config["eval"]["splits"], "k": self.config["eval"]["k"]}
        return {"splits": ["train"], "k": self.config["consolidate"]["samples_per_task"]}

    def harvest_settings(self) -> dict:
        """What decides the harvest pool's scored samples besides the experts: the rules
        that use them with ancient() inputs take these as params instead."""
        return {
            "pool": self.pool("harvest"),
            "sampling": self.sampling(),
            "seeds": {e: self.eval_seed("rl", e) for e in self.experts},
            # the key runs made before recorded: renaming it would re-run the distillation
            "limits": self.simulation(),
        }
