"""Training-free consolidation of RL experts with mergekit.

METHODS is the one table of the merge methods (what each needs); `mergekit_config`
builds from it the YAML-equivalent mapping mergekit documents for each method;
`run_merge` runs it through mergekit's Python API.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from chorus.io import atomic_dir

MEAN = "1/n"  # a weight default: one over the number of models


@dataclass(frozen=True)
class MergeMethod:
    """What a mergekit merge method needs, read by the config check (chorus.plan) and by
    mergekit_config. `base`: none; task_vectors (the SFT checkpoint the experts started
    from, against which task vectors are taken); first (the first model). `models`:
    exactly this many (None: any number). `per_model` and `overall`: the
    merge.strategies[].params it reads, per model or for the whole merge, with their
    defaults (None: left to mergekit unless given); a per-model `weight` may also come
    as `weights`, one per model."""

    base: str = "none"
    models: int | None = None
    per_model: dict = field(default_factory=dict)
    overall: dict = field(default_factory=dict)

    @property
    def params(self) -> tuple[str, ...]:
        extra = ("weights",) if "weight" in self.per_model else ()
        return (*self.per_model, *extra, *self.overall)


# mergekit's methods that chorus offers; adding one: its row here, and its test
METHODS = {
    "linear": MergeMethod(per_model={"weight": MEAN}, overall={"normalize": True}),
    "task_arithmetic": MergeMethod(base="task_vectors", per_model={"weight": 1.0}, overall={"normalize": None}),
    "ties": MergeMethod(base="task_vectors", per_model={"weight": 1.0, "density": 0.5}, overall={"normalize": None}),
    "dare_ties": MergeMethod(base="task_vectors", per_model={"weight": 1.0, "density": 0.5},
                             overall={"normalize": None}),
    "slerp": MergeMethod(base="first", models=2, overall={"t": 0.5}),
}


def mergekit_config(
    method: str,
    models: list[str],
    base_model: str | None,
    params: dict | None = None,
    *,
    dtype: str = "float32",
) -> dict:
    """mergekit configuration (the mapping a mergekit YAML holds) for `method` (METHODS)
    over `models` (local paths), with `params` (merge.strategies[].params) over the
    method's defaults. `base_model`: the SFT checkpoint the experts started from, for the
    task-vector methods. `density` is in (0, 1], slerp's `t` in [0, 1] (t=0 is the first
    model)."""
    params = dict(params or {})
    if method not in METHODS:
        raise ValueError(f"unknown merge method {method!r} (one of {tuple(METHODS)})")
    spec = METHODS[method]
    models = [str(m) for m in models]
    if not models:
        raise ValueError("nothing to merge: no models")
    if spec.models is not None and len(models) != spec.models:
        raise ValueError(f"{method} merges exactly {spec.models} models, got {len(models)}")
    if spec.base == "task_vectors" and base_model is None:
        raise ValueError(f"{method} needs the base model the experts were trained from")
    config: dict = {"merge_method": method, "dtype": dtype}
    if spec.base == "first":
        config["base_model"] = models[0]
    config["models"] = [{"model": m, **({"parameters": p} if p else {})}
                        for m, p in zip(models, _per_model(spec, params, len(models)))]
    if spec.base == "task_vectors":
        config["base_model"] = str(base_model)
    overall = {k: params.get(k, default) for k, default in spec.overall.items()}
    overall = {k: float(v) if k == "t" else bool(v) for k, v in overall.items() if v is not None}
    if not 0.0 <= overall.get("t", 0.0) <= 1.0:
        raise ValueError(f"slerp t must be in [0, 1], got {overall['t']}")
    if overall:
        config["parameters"] = overall
    return config


def _per_model(spec: MergeMethod, params: dict, count: int) -> list[dict]:
    """Each model's mergekit parameters: `weights` one per model, else `weight` for all."""
    values = {}
    for name, default in spec.per_model.items():
        value = params.get(name, default)
        values[name] = [float(value if value != MEAN else 1.0 / count)] * count
    if "weight" in spec.per_model and "weights" in params:
        values["weight"] = [float(w) for w in params["weights"]]
        if len(values["weight"]) != count:
            raise ValueError(f"{len(values['weight'])} weights for {count} models")
    for density in values.get("density", []):
        if not 0.0 < density <= 1.0:
            raise ValueError(f"density must be in (0, 1], got {density}")
    return [{name: column[i] for name, column in values.items()} for i in range(count)]


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def run_merge(config: dict, out_dir: str | Path, *, device: str = "cpu", seed: int = 0) -> Path:
    """Run mergekit's Python API (no model card: its generator queries the hub about
    each path); the merged model, the tokenizer and `mergekit_config.yml` land in
    `out_dir` atomically. `seed` fixes DARE's random drops."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import MergeOptions, run_merge as mergekit_run

    from chorus.modeling import load_tokenizer

    options = MergeOptions(
        device=device,
        copy_tokenizer=True,
        write_model_card=False,
        random_seed=seed,
        lazy_unpickle=False,
        safe_serialization=True,
        quiet=True,
    )
    with atomic_dir(out_dir) as staging:
        mergekit_run(MergeConfiguration.model_validate(config), str(staging), options=options)
        if not all((staging / name).exists() for name in TOKENIZER_FILES):
            # mergekit logs a failed tokenizer copy and carries on; do it ourselves
            donor = config.get("base_model") or config["models"][0]["model"]
            load_tokenizer(donor).save_pretrained(staging)
        (staging / "mergekit_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return Path(out_dir)
