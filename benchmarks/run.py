"""CPU benchmarks of the coverage harness; every figure is a ratio measured in this run.

  python benchmarks/run.py            # about 2-4 minutes on 2 cores

1. build cache: a candidate with a cold Verilator build vs. a candidate on the cached
   build (the pipeline scores thousands of candidates per design);
2. parallel scoring: candidates/s with 1..N sandboxes at once (N = cores);
3. sandbox overhead: ms per candidate for the confined child process (netns, mount
   namespace, pid namespace, rlimits, uid drop, guard) vs. the same simulator command
   run directly, unconfined; and vs. cocotb's runner (what a candidate cost before the
   sandbox started the simulator binary itself).
Prints a table and writes benchmarks/results/cpu.json.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from chorus.harness import SandboxLimits, ensure_build, score, score_many
from chorus.harness.cocotb_run import simulator_command
from chorus.harness.toolchain import setup_verilator_env
from chorus.tasks import load_tasks

TASK_ID = "fifo_sync"
RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn, repeat: int = 1) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def unconfined_run(task, stimulus: str, build_dir: Path) -> None:
    """The simulator command the sandbox runs, started directly: no child, no confinement."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "stimulus.py").write_text(stimulus)
        command, env = simulator_command(Path(tmp), build_dir, task.toplevel, seed=0, guard=False)
        subprocess.run(command, cwd=tmp, env=env, check=True, capture_output=True)
        assert Path(tmp, "coverage.dat").is_file()


def runner_run(task, stimulus: str, build_dir: Path) -> None:
    """cocotb's runner, in a plain subprocess, unconfined."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "stimulus.py").write_text(stimulus)
        code = (
            "import sys; from cocotb_tools.runner import get_runner; "
            f"get_runner('verilator').test(test_module='stimulus', hdl_toplevel={task.toplevel!r}, "
            f"hdl_toplevel_lang='verilog', build_dir={str(build_dir)!r}, test_dir={tmp!r})"
        )
        env = setup_verilator_env({**os.environ, "PYTHONPATH": tmp})
        subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env, check=True, capture_output=True)


def main() -> None:
    task = next(t for t in load_tasks() if t.id == TASK_ID)
    stimulus = task.reference_stimulus.read_text()
    cores = len(os.sched_getaffinity(0))
    report: dict = {"machine": f"{platform.node()} {platform.machine()}, {cores} cores",
                    "date": date.today().isoformat(), "task": TASK_ID}

    # 1. cold build + candidate vs. candidate on the cached build
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parents[1] / ".cache") as cold_cache:
        os.chmod(cold_cache, 0o755)
        cold = timed(lambda: score(task, stimulus, cache_dir=cold_cache))
        warm = timed(lambda: score(task, stimulus, cache_dir=cold_cache), repeat=5)
    report["cold_build_candidate_s"] = cold
    report["cached_candidate_s"] = warm
    report["cache_speedup"] = cold / warm

    # 2. parallel scaling on this machine's cores
    build_dir = ensure_build(task)
    batch = [(task, stimulus)] * (8 * cores)
    scaling = {}
    for workers in range(1, cores + 1):
        seconds = timed(lambda: score_many(batch, workers=workers))
        scaling[workers] = len(batch) / seconds
    report["candidates_per_s"] = scaling
    report["parallel_speedup"] = scaling[cores] / scaling[1]
    report["parallel_efficiency"] = report["parallel_speedup"] / cores

    # 3. sandbox overhead per candidate
    confined = timed(lambda: score(task, stimulus), repeat=7)
    loose = timed(lambda: score(task, stimulus, limits=SandboxLimits(
        isolate_network=False, drop_privileges=False, guard=False)), repeat=7)
    bare = timed(lambda: unconfined_run(task, stimulus, build_dir), repeat=7)
    via_runner = timed(lambda: runner_run(task, stimulus, build_dir), repeat=7)
    report["sandboxed_ms"] = confined * 1000
    report["child_only_ms"] = loose * 1000
    report["unconfined_simulator_ms"] = bare * 1000
    report["unconfined_runner_ms"] = via_runner * 1000
    report["sandbox_overhead_ms"] = (confined - bare) * 1000
    report["sandbox_overhead_ratio"] = confined / bare
    report["sandboxed_vs_runner_speedup"] = via_runner / confined

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "cpu.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"machine: {report['machine']}   task: {TASK_ID}")
    print(f"{'cold build + candidate':38s} {cold:8.2f} s")
    print(f"{'candidate on cached build':38s} {warm:8.2f} s")
    print(f"{'  cache speedup':38s} {report['cache_speedup']:8.1f} x   (target >= 20x)")
    for workers, rate in scaling.items():
        print(f"{f'candidates/s, {workers} sandbox(es) at once':38s} {rate:8.2f}")
    print(f"{'  parallel speedup':38s} {report['parallel_speedup']:8.2f} x on {cores} cores "
          f"(efficiency {report['parallel_efficiency']:.0%})")
    print(f"{'sandboxed candidate':38s} {confined * 1000:8.0f} ms")
    print(f"{'  child process, confinement off':38s} {loose * 1000:8.0f} ms")
    print(f"{'  simulator run directly, no sandbox':38s} {bare * 1000:8.0f} ms")
    print(f"{'  cocotb runner, no sandbox':38s} {via_runner * 1000:8.0f} ms")
    print(f"{'  sandbox overhead':38s} {report['sandbox_overhead_ms']:8.0f} ms "
          f"({report['sandbox_overhead_ratio']:.2f} x)")
    print(f"{'  sandboxed vs cocotb runner':38s} {report['sandboxed_vs_runner_speedup']:8.2f} x faster")


if __name__ == "__main__":
    main()
