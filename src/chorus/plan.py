"""The workflow's plan: which models exist and where they live, derived from the config.

The Snakefile and its rules ask this module for names and paths so that the job graph
(SFT stages x RL experts x merge strategies x evaluated models) is defined in one place.
Checks that a JSON schema cannot express (cross references between sections) live here
too, so a bad config fails at start-up with a message naming the key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from chorus.modeling import GGUF_PRESETS, is_preset

MODEL_KINDS = ("base", "sft", "rl", "merge", "consolidated")
POOLS = ("eval", "harvest")  # eval: held-out evaluation; harvest: train-task samples for distillation


class ConfigError(ValueError):
    """The config passed the schema but is inconsistent (e.g. an unknown stage name)."""


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


class Plan:
    def __init__(self, config: dict, results: str = "results"):
        self.config = config
        self.results = results
        self.stages = [s["name"] for s in config["sft"]["stages"]]
        self.experts = [e["name"] for e in config["rl"]["experts"]]
        self.merges = [m["name"] for m in config["merge"]["strategies"]]
        self.check()

    # -- validation beyond the schema -------------------------------------------------
    def check(self) -> None:
        _unique(self.stages, "sft.stages")
        _unique(self.experts, "rl.experts")
        _unique(self.merges, "merge.strategies")
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
            if merge["method"] == "slerp" and len(experts) != 2:
                raise ConfigError(
                    f"merge.strategies[{i}]: slerp merges exactly two experts, got {len(experts)}"
                )
            base_stage = merge.get("base_stage")
            if base_stage is not None and base_stage not in self.stages:
                raise ConfigError(f"merge.strategies[{i}].base_stage: unknown stage {base_stage!r}")
        base = self.config["model"].get("base")
        if base and not is_preset(base) and os.sep not in base and not os.path.exists(base):
            raise ConfigError(
                f"model.base: {base!r} is neither a preset ({', '.join(GGUF_PRESETS)}) nor a model folder"
            )
        if self.consolidate_enabled and self.consolidate_base_stage not in self.stages:
            raise ConfigError(
                f"consolidate.base_stage: {self.consolidate_base_stage!r} is not an sft stage"
            )

    # -- lookups ----------------------------------------------------------------------
    def stage(self, name: str) -> dict:
        return next(s for s in self.config["sft"]["stages"] if s["name"] == name)

    def previous_stage(self, name: str) -> str | None:
        index = self.stages.index(name)
        return self.stages[index - 1] if index else None

    def expert(self, name: str) -> dict:
        rl = self.config["rl"]
        spec = next(e for e in rl["experts"] if e["name"] == name)
        shared = {k: v for k, v in rl.items() if k != "experts"}
        return {**shared, "reward": "dense", "seed": 0, **spec}

    def merge(self, name: str) -> dict:
        return next(m for m in self.config["merge"]["strategies"] if m["name"] == name)

    def merge_experts(self, name: str) -> list[str]:
        experts = self.merge(name).get("experts", "all")
        return list(self.experts) if experts == "all" else list(experts)

    def merge_base_stage(self, name: str) -> str:
        """SFT checkpoint used as the merge's base model (task vectors are taken against it)."""
        merge = self.merge(name)
        if "base_stage" in merge:
            return merge["base_stage"]
        stages = [self.expert(e)["from_stage"] for e in self.merge_experts(name)]
        # the latest stage any of the merged experts started from
        return max(stages, key=self.stages.index)

    @property
    def consolidate_enabled(self) -> bool:
        return bool(self.config.get("consolidate", {}).get("enabled", False))

    @property
    def consolidate_base_stage(self) -> str:
        """SFT checkpoint the distilled model starts from (default: the last stage)."""
        return self.config.get("consolidate", {}).get("base_stage", self.stages[-1])

    @property
    def consolidated_names(self) -> list[str]:
        if not self.consolidate_enabled:
            return []
        name = self.config["consolidate"].get("name", "distill")
        names = [name]
        if self.config["consolidate"].get("rl_after"):
            names.append(f"{name}_rl")
        return names

    # -- models and their paths -------------------------------------------------------
    def models(self) -> list[ModelRef]:
        """Every model the workflow evaluates."""
        refs = []
        if self.config["eval"].get("include_base", True):
            refs.append(ModelRef("base", "base"))
        refs += [ModelRef("sft", s) for s in self.stages]
        refs += [ModelRef("rl", e) for e in self.experts]
        refs += [ModelRef("merge", m) for m in self.merges]
        refs += [ModelRef("consolidated", c) for c in self.consolidated_names]
        return refs

    def model_dir(self, kind: str, name: str) -> str:
        if kind == "base":
            external = self.config["model"].get("base")
            # null (the tiny model) and presets are built by the build_base_model rule
            return external if external and not is_preset(external) else f"{self.results}/models/base"
        if kind not in MODEL_KINDS:
            raise ConfigError(f"unknown model kind {kind!r}")
        return f"{self.results}/models/{kind}/{name}"

    def shards(self) -> list[int]:
        return list(range(self.config["simulation"]["shards"]))
