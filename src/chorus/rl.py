"""Dense-reward RL experts with TRL's GRPOTrainer.

The reward of a completion is the coverage it reaches when simulated with the task's
design (`SimResult.score`: mean over the targeted metrics of min(achieved/target, 1)),
or, for the ablation, the binary pass. A second, small reward term checks the answer
format (a python block that compiles). Rollout completions of one step are simulated
in parallel sandboxes.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from chorus.harness import SandboxLimits, score_many
from chorus.io import atomic_write_json
from chorus.modeling import save_model_atomically
from chorus.prompts import build_prompt, extract_stimulus
from chorus.sft import last_checkpoint, precision_flags, work_dir_for
from chorus.tasks import Task

log = logging.getLogger(__name__)


def completion_text(completion) -> str:
    """TRL passes conversational completions as message lists, plain ones as strings."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion)
    return completion


class CoverageReward:
    """reward(completions, task_id, **kw) -> coverage score per completion (TRL API)."""

    def __init__(self, tasks: list[Task], mode: str = "dense", workers: int | None = None,
                 limits: SandboxLimits | None = None):
        if mode not in ("dense", "binary"):
            raise ValueError(f"reward mode must be dense or binary, not {mode!r}")
        self.tasks = {t.id: t for t in tasks}
        self.mode = mode
        self.workers = workers
        self.limits = limits
        self.__name__ = f"coverage_{mode}"
        self.calls: list[dict] = []  # per step: wall time and reward statistics

    def __call__(self, completions, task_id, **kwargs) -> list[float]:
        start = time.perf_counter()
        items = [(self.tasks[t], extract_stimulus(completion_text(c))) for c, t in zip(completions, task_id)]
        results = score_many(items, workers=self.workers, limits=self.limits)
        rewards = [r.score if self.mode == "dense" else float(r.passed) for r in results]
        statuses: dict[str, int] = {}
        for r in results:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        self.calls.append(
            {
                "wall_s": time.perf_counter() - start,
                "n": len(rewards),
                "mean_reward": sum(rewards) / len(rewards),
                "passed": sum(r.passed for r in results),
                "statuses": statuses,
            }
        )
        return rewards


def format_reward(completions, **kwargs) -> list[float]:
    """1 when the completion holds a python block that compiles, else 0."""
    rewards = []
    for completion in completions:
        text = completion_text(completion)
        code = extract_stimulus(text)
        try:
            compile(code, "stimulus.py", "exec")
            ok = "```" in text and "cocotb" in code
        except (SyntaxError, ValueError):
            ok = False
        rewards.append(float(ok))
    return rewards


def rl_dataset(tasks: list[Task]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": build_prompt(t), "task_id": t.id} for t in tasks])


def train_expert(
    model_in: str | Path,
    tasks: list[Task],
    out_dir: str | Path,
    *,
    reward: str = "dense",
    format_weight: float = 0.1,
    num_generations: int = 4,
    max_completion_length: int = 256,
    steps: int = 10,
    lr: float = 1e-5,
    beta: float = 0.0,
    temperature: float = 1.0,
    batch_size: int = 4,
    seed: int = 0,
    sim_workers: int | None = None,
    sim_limits: SandboxLimits | None = None,
    device: str = "cpu",
    deepspeed_config: str | None = None,
    save_steps: int = 50,
) -> dict:
    """GRPO from `model_in` on `tasks`; the expert is saved to `out_dir` atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    if not tasks:
        raise ValueError("RL needs at least one task")
    work_dir = work_dir_for(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_in)
    flags = precision_flags(device)
    model = AutoModelForCausalLM.from_pretrained(model_in, dtype="bfloat16" if flags["bf16"] else "float32")
    coverage = CoverageReward(tasks, reward, sim_workers, sim_limits)
    # the generation batch must hold whole groups of num_generations completions
    batch = max(batch_size, num_generations)
    batch -= batch % num_generations
    args = GRPOConfig(
        output_dir=str(work_dir),
        max_steps=steps,
        learning_rate=lr,
        beta=beta,
        temperature=temperature,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        per_device_train_batch_size=batch,
        reward_weights=[1.0, format_weight],
        logging_steps=1,
        save_strategy="steps",
        save_steps=save_steps,
        save_total_limit=2,
        report_to="none",
        seed=seed,
        deepspeed=deepspeed_config,
        dataloader_num_workers=0,
        **flags,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[coverage, format_reward],
        args=args,
        train_dataset=rl_dataset(tasks),
        processing_class=tokenizer,
    )
    resume = last_checkpoint(work_dir)
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    runtime = time.perf_counter() - start
    reward_wall = sum(c["wall_s"] for c in coverage.calls)
    metrics = {
        "steps": trainer.state.global_step,
        "reward_mode": reward,
        "runtime_s": runtime,
        "reward_wall_s": reward_wall,
        "reward_time_fraction": reward_wall / runtime if runtime else None,
        "reward_calls": coverage.calls,
        "log_history": trainer.state.log_history,
        "resumed_from": resume,
    }
    if trainer.is_world_process_zero():
        save_model_atomically(trainer.model, tokenizer, out_dir)
        atomic_write_json(Path(out_dir) / "rl_metrics.json", json.loads(json.dumps(metrics, default=str)))
        shutil.rmtree(work_dir, ignore_errors=True)
    return metrics
