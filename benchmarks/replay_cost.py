"""Per-candidate cost of scoring with the replay (issue 32) against another source tree
(the code before a change), on cached builds, in alternating rounds on this machine:
wall time and CPU time (user + system), which a shared VM disturbs less: of the
candidate's processes (the sandbox child, the simulator, the replay: RUSAGE_CHILDREN)
and of the scorer's own work for the candidate (RUSAGE_SELF).

    python benchmarks/replay_cost.py --baseline-src /path/to/main/src [--rounds 15] [--cvdp-example]

`--cvdp-example`: a SystemVerilog testbench answer instead (CVDP's example row, converted
from tests/fixtures/cvdp; its solution testbench). Each round scores the task's reference
answer once with this tree's harness and once
with the baseline's (each in a process of its own, started once), end to end through
`chorus.harness.score`; prints the medians and the ratios, writes the raw figures to
benchmarks/results/replay_cost.json (replay_cost_svtb.json with `--cvdp-example`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CVDP_EXAMPLE = "cvdp_v1.1.0_example_nonagentic_code_generation_commercial_with_solutions.jsonl"
WORKER = r"""
import json, resource, sys, time
from chorus.harness import score, prebuild
from chorus.tasks import load_task
task = load_task(sys.argv[1])
prebuild(task)
text = task.reference_stimulus.read_text()
assert score(task, text).passed
def cpu(who):
    used = resource.getrusage(who)
    return used.ru_utime + used.ru_stime
for line in sys.stdin:
    start, children, scorer = time.perf_counter(), cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF)
    result = score(task, text)
    print(json.dumps({"s": time.perf_counter() - start, "cpu_s": cpu(resource.RUSAGE_CHILDREN) - children,
                      "scorer_cpu_s": cpu(resource.RUSAGE_SELF) - scorer, "sim_s": result.sim_time_s,
                      "status": result.status}), flush=True)
"""


def _worker(src: Path | None, task: str, cache: Path) -> subprocess.Popen:
    env = {**os.environ, "CHORUS_CACHE_DIR": str(cache)}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    return subprocess.Popen([sys.executable, "-c", WORKER, task], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)


def _one(proc: subprocess.Popen) -> dict:
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return json.loads(proc.stdout.readline())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-src", type=Path, required=True, help="the src/ folder of the code to compare with")
    parser.add_argument("--task", default=str(REPO / "tests" / "fixtures" / "tasks" / "fx_counter"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--cache", type=Path, default=REPO / ".cache" / "replay-bench")
    parser.add_argument("--cvdp-example", action="store_true",
                        help="score CVDP's example row (a SystemVerilog testbench) instead of --task")
    parser.add_argument("--out", help="file name under benchmarks/results (default replay_cost.json, "
                        "replay_cost_svtb.json with --cvdp-example)")
    args = parser.parse_args(argv)
    if args.cvdp_example:
        from chorus.cvdp import convert_cvdp_jsonl

        fixture = REPO / "tests" / "fixtures" / "cvdp" / CVDP_EXAMPLE
        args.task = str(convert_cvdp_jsonl(fixture, args.cache / "cvdp-tasks")[0].root)
    workers = {"replay": _worker(None, args.task, args.cache / "replay"),
               "baseline": _worker(args.baseline_src, args.task, args.cache / "baseline")}
    times = {name: [] for name in workers}
    cpu_times = {name: [] for name in workers}  # the candidate's processes, user + system
    scorer_cpu_times = {name: [] for name in workers}  # the scorer's own, user + system
    sim_times = {name: [] for name in workers}  # the sandboxed run (and the replay)
    for _ in range(args.rounds):
        for name, proc in workers.items():
            row = _one(proc)
            assert row["status"] == "ok", row
            times[name].append(row["s"])
            cpu_times[name].append(row["cpu_s"])
            scorer_cpu_times[name].append(row["scorer_cpu_s"])
            sim_times[name].append(row["sim_s"])
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    medians = {name: statistics.median(values) for name, values in times.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpu_times.items()}
    scorer_cpu_medians = {name: statistics.median(values) for name, values in scorer_cpu_times.items()}
    sim_medians = {name: statistics.median(values) for name, values in sim_times.items()}
    report = {"task": args.task, "rounds": args.rounds, "as_root": os.geteuid() == 0,
              "median_s": medians, "cpu_median_s": cpu_medians, "scorer_cpu_median_s": scorer_cpu_medians,
              "sim_median_s": sim_medians,
              "ratio": medians["replay"] / medians["baseline"],
              "cpu_ratio": cpu_medians["replay"] / cpu_medians["baseline"],
              "times_s": times, "cpu_times_s": cpu_times, "scorer_cpu_times_s": scorer_cpu_times,
              "sim_times_s": sim_times}
    name = args.out or ("replay_cost_svtb.json" if args.cvdp_example else "replay_cost.json")
    out = REPO / "benchmarks" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"median per candidate: replay {medians['replay'] * 1000:.0f} ms, "
          f"baseline {medians['baseline'] * 1000:.0f} ms, ratio {report['ratio']:.2f}; CPU of the candidate's "
          f"processes: replay {cpu_medians['replay'] * 1000:.0f} ms, "
          f"baseline {cpu_medians['baseline'] * 1000:.0f} ms, "
          f"ratio {report['cpu_ratio']:.2f}; the scorer's own CPU: replay "
          f"{scorer_cpu_medians['replay'] * 1000:.0f} ms, baseline {scorer_cpu_medians['baseline'] * 1000:.0f} ms; "
          "of which simulated "
          f"(sim_time_s): replay {sim_medians['replay'] * 1000:.0f} ms, baseline {sim_medians['baseline'] * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
