"""Where a cocotb candidate's Run 1 (the sandboxed simulation) spends its time, on a
cached build: the same confined run with less and less in it, in alternating rounds,
wall and CPU (user + system of the sandbox child and all it starts) medians.

    python benchmarks/run1_profile.py [--task DIR] [--rounds 15] [--imports 12]

Stages: `child` (the confined child running /bin/true: namespaces, private root,
seccomp), `no_python` (the simulator with cocotb's GPI entry point left out: no Python
starts), `trivial` (a test that does nothing: Python, cocotb and its imports),
`reference` (the task's reference stimulus, as scored). With `--imports N`: the N
slowest top-level imports of the simulator's Python for the reference
(PYTHONPROFILEIMPORTTIME). Writes benchmarks/results/run1_profile.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

from chorus.harness.build import ensure_build
from chorus.harness.cocotb_run import simulator_command, write_stimulus
from chorus.harness.outputs import LOG_NAME, OUT_DIR, SIMULATOR_WRITES
from chorus.harness.sandbox import GUARD_DIR, SandboxLimits, confined_workdir, run_confined
from chorus.tasks import load_task

REPO = Path(__file__).resolve().parents[1]
TRIVIAL = "import cocotb\n\n\n@cocotb.test()\nasync def nothing(dut):\n    pass\n"
STAGES = ("child", "no_python", "trivial", "reference")


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_stage(stage: str, task, build: Path, import_times: bool = False) -> tuple[float, float, str]:
    """(wall s, CPU s, log) of one confined Run 1 of `stage`, prepared as run_candidate does."""
    limits = SandboxLimits()
    text = TRIVIAL if stage == "trivial" else task.reference_stimulus.read_text()
    with confined_workdir(limits) as folder:
        write_stimulus(folder.home, text)
        with folder.outputs(OUT_DIR, SIMULATOR_WRITES) as outputs:
            command, env = simulator_command(folder.home, build, task.toplevel, 0, limits.guard, outputs.out)
            if stage == "child":
                command = ["/bin/true"]
            if stage == "no_python":
                env.pop("GPI_USERS")
            if import_times:
                env["PYTHONPROFILEIMPORTTIME"] = "1"
            start, cpu = time.perf_counter(), _cpu()
            run = run_confined(command, env, folder, outputs, limits, read_only=[build, GUARD_DIR])
            wall, cpu = time.perf_counter() - start, _cpu() - cpu
            log = outputs.path(LOG_NAME).read_text(errors="replace") if import_times else ""
    if run.returncode != 0:
        raise RuntimeError(f"{stage}: exit {run.returncode}\n{run.log_tail}")
    return wall, cpu, log


def slowest_imports(log: str, count: int) -> list[tuple[str, float]]:
    """(module, cumulative ms) of the top-level imports in a PYTHONPROFILEIMPORTTIME log."""
    found = []
    for line in log.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            _, cumulative, name = line.split("|")
            if name.startswith(" ") and not name.startswith("  ") and cumulative.strip().isdigit():
                found.append((name.strip(), int(cumulative) / 1000))
    return sorted(found, key=lambda item: -item[1])[:count]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=str(REPO / "tests" / "fixtures" / "tasks" / "fx_counter"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--imports", type=int, default=12, help="slowest top-level imports to list (0: none)")
    args = parser.parse_args(argv)
    task = load_task(args.task)
    build = ensure_build(task)
    figures = {stage: {"wall_s": [], "cpu_s": []} for stage in STAGES}
    for _ in range(args.rounds):
        for stage in STAGES:
            wall, cpu, _ = run_stage(stage, task, build)
            figures[stage]["wall_s"].append(wall)
            figures[stage]["cpu_s"].append(cpu)
    report = {"task": args.task, "rounds": args.rounds, "stages": {
        stage: {"median_wall_s": statistics.median(f["wall_s"]), "median_cpu_s": statistics.median(f["cpu_s"]), **f}
        for stage, f in figures.items()}}
    for stage, row in report["stages"].items():
        print(f"{stage:10s} wall {row['median_wall_s'] * 1000:6.0f} ms  CPU {row['median_cpu_s'] * 1000:6.0f} ms")
    if args.imports:
        total = slowest_imports(run_stage("reference", task, build, import_times=True)[2], 10 ** 6)
        report["imports_ms"] = total[:args.imports]
        report["all_top_level_imports_ms"] = round(sum(ms for _, ms in total), 1)
        print(f"top-level imports of the reference's run: {report['all_top_level_imports_ms']:.0f} ms in all")
        for name, ms in report["imports_ms"]:
            print(f"  {ms:7.1f} ms  {name}")
    out = REPO / "benchmarks" / "results" / "run1_profile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
