"""The settings a job acts on, one object each, like TRL's SFTConfig and GRPOConfig.

Each is named and shaped like its section of config/config.schema.yaml, so a setting keeps
its schema name from the YAML to the library call: the Plan builds the section's values
(chorus.plan), the job's script makes them one object (`from_job`) and hands it whole to
the job function, which reads them by the same names. The defaults here serve callers
outside the workflow (tests, benchmarks); the workflow passes every key, and its defaults
are the schema's. The fields after the schema's are knobs the config does not expose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from chorus.training import COMPILE_MIN_FLOPS


def _from_config(cls, values: dict):
    """`cls` of a workflow job's values, which hold every field the config sets
    (cls.CONFIGURED): a missing one fails instead of taking a default meant for tests."""
    missing = [name for name in cls.CONFIGURED if name not in values]
    if missing:
        raise KeyError(f"{cls.__name__}: the job's settings lack {missing}")
    return cls(**values)


@dataclass(frozen=True)
class SFTStage:
    """One SFT stage: config `sft.stages[i]` (its seed: sft.seed unless its own) with the
    batch and kernel settings that every stage shares (config `sft`, `max_length`). The
    consolidation SFT is a stage too (Plan.distill_stage)."""

    CONFIGURED: ClassVar[tuple[str, ...]] = (
        "name", "epochs", "lr", "seed", "batch_size", "grad_accum", "max_length", "attention", "liger_kernel",
        "compile_min_flops", "save_steps",
    )

    name: str = "sft"
    epochs: float = 1.0
    lr: float = 1e-4
    seed: int = 0
    batch_size: int = 2
    grad_accum: int = 1
    max_length: int = 2048
    attention: str = "auto"
    liger_kernel: bool | str = "auto"
    compile_min_flops: float | None = COMPILE_MIN_FLOPS
    save_steps: int = 200
    max_steps: int = -1
    gradient_checkpointing: bool = False
    packing: bool | str = "auto"
    lr_scheduler_type: str = "cosine"
    warmup: float = 0.0

    @classmethod
    def from_job(cls, stage: dict, shared: dict) -> SFTStage:
        """The stage of a workflow SFT job: its `stage` and `settings` params (Plan.stage or
        Plan.distill_stage, Plan.sft_settings; save_steps added by plan.job_settings). The
        params spell sft.attention and sft.liger_kernel `attn` and `liger`, as runs made
        before recorded them (renaming them there would re-run every SFT job)."""
        shared = dict(shared)
        spelled = {"attention": shared.pop("attn"), "liger_kernel": shared.pop("liger")}
        stage = {k: v for k, v in stage.items() if k != "mix"}  # the stage's data (sft_data's)
        return _from_config(cls, {**shared, **spelled, **stage})


@dataclass(frozen=True)
class GRPOExpert:
    """One RL expert's GRPO settings: config `rl` with the expert's own values of
    `rl.experts[i]` over the shared ones, its seed raised by its seed replicate
    (Plan.expert). `steps` None: `epochs` passes over the tasks; `grad_accum` None: one
    micro-batch per optimizer step; `steps_per_generation` None: TRL's (grad_accum)."""

    CONFIGURED: ClassVar[tuple[str, ...]] = (
        "name", "from_stage", "reward", "seed", "splits", "difficulties", "lr", "steps", "beta", "num_generations",
        "max_completion_length", "temperature", "top_p", "format_weight", "batch_size", "grad_accum", "steps_per_generation",
        "save_steps", "rollout_backend", "rounds", "time_budget_s",
    )

    name: str = "expert"
    from_stage: str | None = None
    reward: str = "dense"
    seed: int = 0
    splits: tuple[str, ...] = ("train",)
    difficulties: tuple[str, ...] = ()
    lr: float = 1e-5
    steps: int | None = 10
    beta: float = 0.0
    num_generations: int = 4
    max_completion_length: int = 256
    temperature: float = 1.0
    format_weight: float = 0.1
    batch_size: int = 4
    steps_per_generation: int | None = None
    save_steps: int = 50
    rollout_backend: str = "auto"
    rounds: int | None = None  # coverage-closure rounds per episode (None: one)
    epochs: float = 1.0
    grad_accum: int | None = None  # micro-batches of batch_size per optimizer step (None: one)
    top_p: float | None = None  # rollouts' nucleus (None: none, TRL's 1.0)
    time_budget_s: float | None = None  # training ends with the rollout batch after which another would pass it
    gradient_checkpointing: bool = False
    early_rewards: bool = True
    rollout_compile: bool = False
    rollout_slots: int | None = None

    @classmethod
    def from_job(cls, expert: dict) -> GRPOExpert:
        """The expert of a workflow RL job: its `expert` params (Plan.expert, completed by
        plan.job_settings)."""
        return _from_config(cls, expert)


@dataclass(frozen=True)
class Sampling:
    """How a pool's completions are drawn: config `eval`'s sampling keys (Plan.sampling),
    which the eval and harvest pools share. `batch_size` None: the sampler's own
    (chorus.generate.sample_completions)."""

    CONFIGURED: ClassVar[tuple[str, ...]] = ("temperature", "top_p", "max_new_tokens", "sampler", "batch_size")

    temperature: float = 0.8
    top_p: float = 0.95
    max_new_tokens: int = 48
    sampler: str = "auto"
    batch_size: int | None = None

    @classmethod
    def from_job(cls, sampling: dict) -> Sampling:
        """The sampling of a workflow generation job: its `sampling` params (Plan.sampling,
        batch_size put back by plan.job_settings)."""
        return _from_config(cls, sampling)
