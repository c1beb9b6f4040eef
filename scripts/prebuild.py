"""Build every design of the task set into the shared build cache (and measure each
reference's simulation time for the per-task timeouts), so the RL experts' rewards and
the evaluations' scoring wait on no cold Verilator build."""

import time
from concurrent.futures import ThreadPoolExecutor

from chorus.harness import prebuild
from chorus.harness.timeouts import sandbox_settings
from chorus.io import atomic_write_json, script_logging
from chorus.plan import job_settings
from chorus.tasks import load_manifest

with script_logging(snakemake):
    limits, timeouts = sandbox_settings(job_settings(snakemake.params, snakemake.config)["simulation"])
    designs = {task.design_hash(): task for task in load_manifest(snakemake.input.manifest)}
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=snakemake.threads) as pool:
        list(pool.map(lambda task: prebuild(task, None, limits, timeouts), designs.values()))
    wall_s = round(time.perf_counter() - start, 1)
    print(f"{len(designs)} designs built in {wall_s} s on {snakemake.threads} workers")
    atomic_write_json(snakemake.output.report, {"designs": len(designs), "workers": snakemake.threads, "wall_s": wall_s})
