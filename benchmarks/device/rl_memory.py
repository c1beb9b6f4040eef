"""The GPU memory of one expert, measured before the reproduction starts, sets what Snakemake
lets share the GPU with it (benchmarks/device/experiment_plan.sh):
  python benchmarks/device/rl_memory.py shape EXPERIMENT
      benchmarks/rl_loop.py's arguments for one rollout batch at the experiment's RL shape
      (completions per step, micro-batches, rollout batch, token cap)
  python benchmarks/device/rl_memory.py resources RL_LOOP_JSON
      the gpu-node profile's --set-resources, with the RL rules' gpu_mem_gb set to the
      measured peak plus a margin (on the command line the option replaces the profile's
      whole list, so every rule's value is given again)
rl_loop's model is SmolLM2-135M's shape with random weights: every rollout runs to the token
cap, the most memory a rollout batch can take."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "gpu-node" / "config.yaml"
RL_RULES = ("rl", "consolidate_rl")
# the peak PyTorch allocated, plus what it reserves beside it and the CUDA context
MARGIN, CONTEXT_GIB = 1.15, 2


def shape(experiment: str) -> list[str]:
    """rl_loop.py's arguments: one rollout batch of the experiment's experts."""
    rl = yaml.safe_load((REPO / "config" / "experiments" / f"{experiment}.yaml").read_text())["rl"]
    accum = rl.get("grad_accum") or 1
    micro_batches = rl.get("steps_per_generation") or accum
    tasks = rl["batch_size"] * accum // rl["num_generations"]
    return ["--grpo-tasks", str(tasks), "--grpo-generations", str(rl["num_generations"]),
            "--grpo-grad-accum", str(accum), "--grpo-steps-per-generation", str(micro_batches),
            "--grpo-steps", str(micro_batches // accum), "--grpo-completion-len", str(rl["max_completion_length"])]


def peak_gib(rl_loop_json: Path) -> float | None:
    """The highest peak of the GRPO runs an rl_loop.py report holds."""
    details = json.loads(rl_loop_json.read_text())["details"]
    peaks = [run.get("peak_gpu_allocated_gib") for section, runs in details.items() if section.startswith("grpo_batch")
             for run in runs.values() if isinstance(run, dict)]
    peaks = [p for p in peaks if p]
    return max(peaks) if peaks else None


def resources(rl_loop_json: Path) -> list[str]:
    """--set-resources for the whole profile, the RL rules at the measured peak (none
    measured: the profile's own values)."""
    rules = yaml.safe_load(PROFILE.read_text())["set-resources"]
    peak = peak_gib(rl_loop_json)
    if peak is not None:
        for rule in RL_RULES:
            rules[rule] = {**rules[rule], "gpu_mem_gb": math.ceil(peak * MARGIN + CONTEXT_GIB)}
    return ["--set-resources"] + [f"{rule}:{key}={value}" for rule, values in rules.items()
                                  for key, value in values.items()]


if __name__ == "__main__":
    command, argument = sys.argv[1:3]
    print(" ".join(shape(argument) if command == "shape" else resources(Path(argument))))
