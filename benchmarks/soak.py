"""Soak test of the scorer: thousands of candidates, good, bad and hostile, through the
evaluation path (chorus.harness.score.score_generations: sandboxes in parallel, one
result row per sample appended to a `.partial` sidecar, the table written at the end).

  python benchmarks/soak.py                      # 2,000 candidates, ~15 min on 2 cores
  python benchmarks/soak.py --candidates 200     # a quick look

Checks, each failing the run (exit 1) when it does not hold: every candidate has exactly
one result; every good candidate passes and every bad one fails with the status its kind
must give (timeout, memory, output_limit, ...); no process of a sandbox uid outlives the
run. Reports candidates/s, per-status counts and timings, and the peak memory of the
scorer and of its children. Writes benchmarks/results/soak.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path

from chorus.harness import SandboxLimits
from chorus.harness.sandbox import SANDBOX_UID_BASE, SLOT_COUNT
from chorus.harness.score import default_workers, score_generations
from chorus.tasks import Task, load_tasks

RESULTS = Path(__file__).resolve().parent / "results"
SOAK_TASKS = ("up_counter", "fifo_sync", "edge_detector", "sipo_shift", "gray_codec", "prio_encoder", "uart_tx", "alu8")

HEADER = "import cocotb, os\nfrom cocotb.triggers import Timer\n\n@cocotb.test()\nasync def soak(dut):\n"
# kind -> (share of the mix, stimulus body or None for the task's own file, expected status)
KINDS: dict[str, tuple[float, str | None, str]] = {
    "reference": (0.40, None, "ok"),  # the task's reference stimulus: passes
    "trivial": (0.14, None, "below_target"),  # the task's trivial stimulus: too little coverage
    "syntax_error": (0.08, "def broken(:\n", "syntax_error"),
    "exception": (0.08, HEADER + "    raise RuntimeError('candidate gave up')\n", "runtime_error"),
    "busy_loop": (0.04, HEADER + "    while True:\n        pass\n", "timeout"),
    "endless_sim": (0.04, HEADER + "    while True:\n        await Timer(1, unit='ns')\n", "timeout"),
    "memory_hog": (0.06, HEADER + "    blob = bytearray(10 * 1024**3)\n", "memory"),
    "output_flood": (0.05, HEADER + "    line = 'x' * 100000\n    while True:\n        print(line)\n",
                     "output_limit"),
    "fork": (0.06, HEADER + "    while True:\n        os.fork()\n", "runtime_error"),
    "no_test": (0.05, "x = 1\n", "runtime_error"),
}


def soak_tasks() -> list[Task]:
    tasks = {t.id: t for t in load_tasks()}
    return [tasks[name] for name in SOAK_TASKS if name in tasks]


def build_mix(count: int, tasks: list[Task], seed: int = 0) -> list[dict]:
    """`count` generation rows ({task_id, sample_id, completion, kind}) in a shuffled,
    deterministic mix of KINDS; completions are fenced like a model's answer."""
    rng = random.Random(seed)
    kinds = list(KINDS)
    weights = [KINDS[k][0] for k in kinds]
    rows = []
    for index in range(count):
        kind = kinds[index % len(kinds)] if index < len(kinds) else rng.choices(kinds, weights)[0]
        task = tasks[index % len(tasks)]
        body = KINDS[kind][1]
        if body is None:
            stimulus = task.reference_stimulus if kind == "reference" else task.trivial_stimulus
            body = stimulus.read_text()
        rows.append({"task_id": task.id, "sample_id": f"soak-{index:05d}", "kind": kind,
                     "completion": f"```python\n{body}```\n"})
    rng.shuffle(rows)
    return rows


def check_results(rows: list[dict], results: list[dict]) -> list[str]:
    """Problems found (empty when all is well): one result per sample, expected verdicts."""
    problems = []
    ids = Counter(r["sample_id"] for r in results)
    duplicated = [s for s, n in ids.items() if n > 1]
    missing = {r["sample_id"] for r in rows} - set(ids)
    if duplicated:
        problems.append(f"{len(duplicated)} samples with more than one result, e.g. {duplicated[:3]}")
    if missing:
        problems.append(f"{len(missing)} samples without a result, e.g. {sorted(missing)[:3]}")
    by_id = {r["sample_id"]: r for r in results}
    for row in rows:
        result = by_id.get(row["sample_id"])
        if result is None:
            continue
        expected = KINDS[row["kind"]][2]
        if result["status"] != expected or result["passed"] != (expected == "ok"):
            problems.append(f"{row['sample_id']} ({row['kind']}, {row['task_id']}): expected {expected}, "
                            f"got {result['status']} passed={result['passed']}: {result['detail'][:200]!r}")
    return problems


def leftover_sandbox_processes() -> list[int]:
    """Live processes owned by a sandbox uid (none may outlive its candidate)."""
    uids = range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SLOT_COUNT)
    left = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid in uids:
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    left.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return left


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory of this process and of its largest waited-for child (KiB on Linux)."""
    return {"scorer_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "largest_child_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def soak(count: int, workers: int, timeout_s: float, out_jsonl: Path, seed: int = 0) -> dict:
    tasks = soak_tasks()
    rows = build_mix(count, tasks, seed)
    limits = SandboxLimits(timeout_s=timeout_s)
    start = time.perf_counter()
    results = score_generations(rows, {t.id: t for t in tasks}, out_jsonl, workers=workers, limits=limits)
    wall = time.perf_counter() - start
    # the table on disk, not the in-memory list, is what the pipeline keeps
    on_disk = [json.loads(line) for line in out_jsonl.read_text().splitlines() if line.strip()]
    problems = check_results(rows, on_disk)
    left = leftover_sandbox_processes()
    if left:
        problems.append(f"sandbox processes left alive: {left[:10]}")
    kinds_of = {r["sample_id"]: r["kind"] for r in rows}
    seconds_by_kind: dict[str, list[float]] = {}
    for result in results:
        seconds_by_kind.setdefault(kinds_of[result["sample_id"]], []).append(result["sim_time_s"])
    return {
        "machine": f"{platform.node()} {platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "date": date.today().isoformat(),
        "candidates": count,
        "workers": workers,
        "timeout_s": timeout_s,
        "tasks": [t.id for t in tasks],
        "wall_s": round(wall, 1),
        "candidates_per_s": round(count / wall, 3),
        "results_on_disk": len(on_disk),
        "kinds": dict(Counter(r["kind"] for r in rows)),
        "statuses": dict(Counter(r["status"] for r in on_disk)),
        "median_s_by_kind": {k: round(statistics.median(v), 3) for k, v in sorted(seconds_by_kind.items())},
        **peak_rss_mb(),
        "leftover_sandbox_processes": len(left),
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--timeout-s", type=float, default=5.0, help="wall-clock limit per candidate")
    parser.add_argument("--out", type=Path, default=RESULTS / "soak.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chorus-soak-") as tmp:
        report = soak(args.candidates, args.workers, args.timeout_s, Path(tmp) / "scores.jsonl")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['candidates']} candidates in {report['wall_s']} s on {report['workers']} sandboxes "
          f"({report['candidates_per_s']} candidates/s), {report['machine']}")
    print(f"results on disk: {report['results_on_disk']}; statuses: {report['statuses']}")
    print(f"median seconds by kind: {report['median_s_by_kind']}")
    print(f"peak memory: scorer {report['scorer_mb']:.0f} MB, largest child {report['largest_child_mb']:.0f} MB; "
          f"sandbox processes left: {report['leftover_sandbox_processes']}")
    for problem in report["problems"][:20]:
        print("PROBLEM:", problem)
    print("OK" if not report["problems"] else f"FAILED: {len(report['problems'])} problems")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
