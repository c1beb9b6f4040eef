"""Verification build cost of synthetic designs: seconds per cold Verilator build without
and with ccache, and with -O0 on top (docs/synth.md).

    python benchmarks/synth_build.py --designs 6 --out benchmarks/results/synth_build.json

Each mode builds the same designs into a fresh build cache; the ccache modes first build
one extra design so the shared Verilator runtime objects are in ccache (as they are after
the first design of any run), using a private ccache folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from chorus.harness import build
from chorus.synth import all_families
from chorus.synth.corpus import design_rng, make_design, task_id, write_task
from chorus.tasks import load_task


def designs(root: Path, count: int, offset: int) -> list:
    fams = list(all_families())
    tasks = []
    for i in range(count):
        fam = fams[(i + offset) % len(fams)]
        tid = task_id(fam, "train", 99, i + offset)
        folder = write_task(make_design(fam, 99, "train", i + offset), root / tid, tid, "train", 1, design_rng(99, "train", i))
        tasks.append(load_task(folder))
    return tasks


def build_times(tasks, cache: Path) -> list[float]:
    times = []
    for task in tasks:
        start = time.perf_counter()
        build.ensure_build(task, cache)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--designs", type=int, default=6)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_before": os.getloadavg()[0]}
    base_flags = build.BASE_FLAGS
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for mode in ("plain", "ccache", "ccache_O0"):
            os.environ.pop("OBJCACHE", None)
            build.BASE_FLAGS = base_flags + (("-CFLAGS", "-O0") if mode.endswith("O0") else ())
            if mode == "plain":
                os.environ["OBJCACHE"] = ""  # use_compiler_cache leaves a set OBJCACHE alone
            else:
                os.environ["CCACHE_DIR"] = str(tmp / "ccache")
                build_times(designs(tmp / f"warm_{mode}", 1, 50), tmp / f"cache_warm_{mode}")
            tasks = designs(tmp / mode, args.designs, 0)
            times = build_times(tasks, tmp / f"cache_{mode}")
            results[mode] = {"s_per_design": round(statistics.mean(times), 2), "each_s": [round(t, 2) for t in times]}
            # a design already in the cache: a lookup, not a build (tests assert only the
            # ratio to a cold build; the seconds are kept here)
            results[mode]["cache_hit_s"] = round(max(build_times(tasks, tmp / f"cache_{mode}")), 3)
            print(mode, results[mode], flush=True)
    build.BASE_FLAGS = base_flags
    results["load_after"] = os.getloadavg()[0]
    results["speedup_ccache"] = round(results["plain"]["s_per_design"] / results["ccache"]["s_per_design"], 2)
    print(json.dumps(results, indent=2))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
