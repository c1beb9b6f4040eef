"""Start a training function once per GPU the job was given.

A SLURM job that asks for N GPUs sees exactly those N (SLURM sets CUDA_VISIBLE_DEVICES);
`process_count` turns them into N ranks and `launch` starts the function under PyTorch's
elastic launcher (`torch.distributed.run`, i.e. torchrun) with one rank per GPU. The
transformers/TRL trainers read the launcher's variables (RANK, WORLD_SIZE, LOCAL_RANK)
and run data-parallel, or sharded with DeepSpeed ZeRO when a DeepSpeed config is given.
On CPU the ranks talk over gloo (what the tests exercise; no GPU in CI). The function's
arguments reach the ranks pickled, so a settings object (chorus.settings) or a task list
arrives as it was given, and the ranks read no setting of their own.

    python -m chorus.launch chorus.sft:train_stage job.pickle   # one rank's entry point
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def process_count(device: str, processes: int | str = "auto") -> int:
    """Ranks for a training job: `processes` when given, else one per visible GPU on
    cuda (the GPUs SLURM allotted) and one on CPU."""
    if processes != "auto":
        count = int(processes)
        if count < 1:
            raise ValueError(f"training processes must be >= 1, not {processes!r}")
        return count
    if device == "cuda":
        import torch

        return max(1, torch.cuda.device_count())
    return 1


def inside_launcher() -> bool:
    return all(name in os.environ for name in LAUNCHER_VARIABLES)


def resolve(target: str):
    """'package.module:function' -> the function."""
    module, _, name = target.partition(":")
    if not module or not name:
        raise ValueError(f"launch target must look like 'package.module:function', not {target!r}")
    return getattr(importlib.import_module(module), name)


def launch(target: str, kwargs: dict, processes: int = 1, *, always_launcher: bool = False):
    """Run `target(**kwargs)`: in this process for one rank (returns its result), else
    as `processes` ranks under torch.distributed.run (returns None; the function writes
    its outputs, e.g. the model and metrics files). `always_launcher` uses the launcher
    for a single rank too (DeepSpeed wants the launcher's rendezvous variables). Raises
    CalledProcessError when a rank fails; the ranks' output goes to this process's
    stdout/stderr (the job log)."""
    function = resolve(target)
    if inside_launcher() or (processes <= 1 and not always_launcher):
        return function(**kwargs)
    # readable by this user alone (NamedTemporaryFile's mode 0600): the ranks unpickle it
    with tempfile.NamedTemporaryFile("wb", prefix="chorus-launch-", suffix=".pickle", delete=False) as spec:
        pickle.dump(kwargs, spec)
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--standalone",  # a rendezvous of its own on this node: jobs sharing a node don't meet
        f"--nproc-per-node={processes}",
        "-m", "chorus.launch", target, spec.name,
    ]
    log.info("launching %d ranks: %s", processes, " ".join(command))
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        subprocess.run(command, check=True, stdout=sys.stdout, stderr=sys.stderr, env=_rank_env())
    finally:
        os.unlink(spec.name)
    return None


def launch_training(target: str, kwargs: dict, settings: dict):
    """A workflow training job, `target(**kwargs)` on every rank: `settings` is the rule's
    `launch` params (config `device`, `deepspeed`, `train_processes` as `processes`) with
    `compile_cache` (chorus.plan.job_settings); the device and DeepSpeed config join
    `kwargs`."""
    from chorus.training import resolve_device

    device = resolve_device(settings["device"])
    use_compile_cache(settings["compile_cache"])
    processes = process_count(device, settings["processes"])
    deepspeed = settings["deepspeed"]
    job = {**kwargs, "device": device, "deepspeed_config": deepspeed}
    return launch(target, job, processes, always_launcher=bool(deepspeed))


def use_compile_cache(path: str | None) -> None:
    """torch.compile (flex_attention + Liger: 5-8 min on an H200) keeps its kernels
    and autotune choices in TORCHINDUCTOR_CACHE_DIR; one folder shared by the training
    jobs lets every job after the first reuse them. A value already in the environment
    wins (a site's own cache)."""
    if path:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path(path).resolve()))


def _rank_env() -> dict[str, str]:
    """The ranks import chorus from wherever this process did (a workflow's src/)."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[1])
    paths = [package_root, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def main(argv: list[str] | None = None) -> int:
    target, spec = (argv or sys.argv[1:])[:2]
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s rank{os.environ.get('RANK', '?')} "
                        "%(levelname)s %(name)s: %(message)s")
    resolve(target)(**pickle.loads(Path(spec).read_bytes()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
