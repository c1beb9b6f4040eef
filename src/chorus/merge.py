"""Training-free consolidation of RL experts with mergekit.

`mergekit_config` builds the YAML-equivalent mapping mergekit documents for each
method; `run_merge` runs it through mergekit's Python API. Task-vector methods
(task_arithmetic, ties, dare_ties) take the SFT checkpoint the experts started from as
`base_model`; slerp interpolates exactly two experts with `t`.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from chorus.io import atomic_dir

METHODS = ("linear", "task_arithmetic", "ties", "dare_ties", "slerp")
TASK_VECTOR_METHODS = ("task_arithmetic", "ties", "dare_ties")


def mergekit_config(
    method: str,
    models: list[str],
    base_model: str | None,
    params: dict | None = None,
    *,
    dtype: str = "float32",
) -> dict:
    """mergekit configuration (the mapping a mergekit YAML holds) for `method` over
    `models` (local paths).

    params: linear: `weight` (default 1/len(models)) or `weights` (one per model),
    `normalize` (default true); task_arithmetic: `weight`/`weights` (default 1.0);
    ties, dare_ties: `weight`/`weights` (default 1.0), `density` (default 0.5),
    `normalize`; slerp: `t` (default 0.5; t=0 is the first model). task_arithmetic, ties
    and dare_ties need `base_model`: the SFT checkpoint the experts started from.
    """
    params = dict(params or {})
    if method not in METHODS:
        raise ValueError(f"unknown merge method {method!r} (one of {METHODS})")
    models = [str(m) for m in models]
    if not models:
        raise ValueError("nothing to merge: no models")
    config: dict = {"merge_method": method, "dtype": dtype}
    if method == "slerp":
        if len(models) != 2:
            raise ValueError(f"slerp merges exactly two models, got {len(models)}")
        t = float(params.get("t", 0.5))
        if not 0.0 <= t <= 1.0:
            raise ValueError(f"slerp t must be in [0, 1], got {t}")
        config["base_model"] = models[0]
        config["models"] = [{"model": m} for m in models]
        config["parameters"] = {"t": t}
        return config
    if method in TASK_VECTOR_METHODS and base_model is None:
        raise ValueError(f"{method} needs the base model the experts were trained from")
    if "weights" in params:
        weights = [float(w) for w in params["weights"]]
        if len(weights) != len(models):
            raise ValueError(f"{len(weights)} weights for {len(models)} models")
    else:
        weights = [float(params.get("weight", 1.0 / len(models) if method == "linear" else 1.0))] * len(models)
    entries = []
    for model, weight in zip(models, weights):
        per_model = {"weight": weight}
        if method in ("ties", "dare_ties"):
            density = float(params.get("density", 0.5))
            if not 0.0 < density <= 1.0:
                raise ValueError(f"density must be in (0, 1], got {density}")
            per_model["density"] = density
        entries.append({"model": model, "parameters": per_model})
    config["models"] = entries
    if method in TASK_VECTOR_METHODS:
        config["base_model"] = str(base_model)
    if "normalize" in params:
        config["parameters"] = {"normalize": bool(params["normalize"])}
    elif method == "linear":
        config["parameters"] = {"normalize": True}
    return config


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
