"""Training-free consolidation of RL experts with mergekit.

`write_mergekit_config` builds the YAML-equivalent mapping mergekit documents for each
method; `run_merge` runs it through mergekit's Python API. Task-vector methods
(task_arithmetic, ties, dare_ties) take the SFT checkpoint the experts started from as
`base_model`; slerp interpolates exactly two experts with `t`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import yaml

METHODS = ("linear", "task_arithmetic", "ties", "dare_ties", "slerp")
TASK_VECTOR_METHODS = ("task_arithmetic", "ties", "dare_ties")


def write_mergekit_config(
    method: str,
    models: list[str],
    base_model: str | None,
    params: dict | None = None,
    *,
    dtype: str = "float32",
    seed: int = 0,
) -> dict:
    """mergekit configuration for `method` over `models` (paths)."""
    params = dict(params or {})
    if method not in METHODS:
        raise ValueError(f"unknown merge method {method!r} (one of {METHODS})")
    config: dict = {"merge_method": method, "dtype": dtype}
    if method == "slerp":
        if len(models) != 2:
            raise ValueError(f"slerp merges exactly two models, got {len(models)}")
        config["base_model"] = str(models[0])
        config["models"] = [{"model": str(m)} for m in models]
        config["parameters"] = {"t": params.get("t", 0.5)}
        return config
    weight = params.get("weight", 1.0 / len(models) if method == "linear" else 1.0)
    per_model = {"weight": weight}
    if method in ("ties", "dare_ties"):
        per_model["density"] = params.get("density", 0.5)
    config["models"] = [{"model": str(m), "parameters": dict(per_model)} for m in models]
    if method in TASK_VECTOR_METHODS:
        if base_model is None:
            raise ValueError(f"{method} needs the base model the experts were trained from")
        config["base_model"] = str(base_model)
    if "normalize" in params:
        config["parameters"] = {"normalize": params["normalize"]}
    elif method == "linear":
        config["parameters"] = {"normalize": True}
    return config


def run_merge(config: dict, out_dir: str | Path, *, device: str = "cpu", seed: int = 0) -> Path:
    """Run mergekit; the merged model (with the first model's tokenizer) and the mergekit
    YAML land in `out_dir` atomically."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import MergeOptions, run_merge as mergekit_run

    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        options = MergeOptions(
            cuda=device.startswith("cuda"),
            copy_tokenizer=True,
            write_model_card=False,  # the card generator asks the hub about each path
            random_seed=seed,  # DARE drops parameters at random
            lazy_unpickle=False,
            quiet=True,
        )
        mergekit_run(MergeConfiguration.model_validate(config), str(staging), options=options)
        (staging / "mergekit_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir
