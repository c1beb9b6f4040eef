"""Verify generated tasks in real simulation and set their targets from what the
reference measurably reaches (as for the shipped tasks).

For every design: build it once, simulate the primary reference, every variant and the
trivial stimulus. The target of each metric the design has is the primary reference's
coverage rounded down to a multiple of `TARGET_STEP` (line and branch are then
normally 1.0). A task is kept when the reference ran cleanly and reaches at least
`MIN_LINE` line coverage (when the design has line points), and the trivial stimulus ran cleanly but misses the target;
variants that fail or miss the target are dropped. Rejected designs are counted by reason.
"""

from __future__ import annotations

import math
import shutil
import time
from collections import Counter
from pathlib import Path

import yaml

from chorus.harness.score import score_many
from chorus.harness.verdict import SCORED_STATUSES, meets_target
from chorus.synth.corpus import design_rng, make_design, task_id, write_meta, write_task
from chorus.tasks import load_task

TARGET_STEP = 0.05
MIN_LINE = 0.8
TARGET_METRICS = ("line", "branch", "toggle")


def target_from(coverage: dict[str, float]) -> dict[str, float]:
    target = {}
    for metric in TARGET_METRICS:
        if metric in coverage:
            value = math.floor(coverage[metric] / TARGET_STEP + 1e-9) * TARGET_STEP
            if value > 0:
                target[metric] = round(value, 2)
    return target


def generate_and_verify(
    jobs: list[tuple[str, int, str]],
    out_dir: str | Path,
    *,
    seed: int,
    variants: int,
    workers: int = 1,
    cache_dir: str | Path | None = None,
) -> dict:
    """Generate the designs `jobs` = [(split, index, family)], verify them, and write the
    accepted task folders into `out_dir`. Returns statistics (counts, reasons, timing)."""
    out_dir = Path(out_dir)
    staging = out_dir / ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.perf_counter()
    tasks = []
    rejects: Counter = Counter()
    errors: dict[str, str] = {}
    examples_of_rejects: dict[str, str] = {}
    for split, index, family in jobs:
        tid = task_id(family, split, seed, index)
        try:
            design = make_design(family, seed, split, index)
            folder = write_task(design, staging / tid, tid, split, variants, design_rng(seed, split, index + 10**6))
            tasks.append(load_task(folder))
        except Exception as err:  # a generator bug: count it, keep the shard going
            rejects[f"generator_error:{family}"] += 1
            errors.setdefault(family, f"{tid}: {err!r}")
    items = [(t, p.read_text()) for t in tasks for p in (*t.references(), t.trivial_stimulus)]
    results = iter(score_many(items, workers=workers, cache_dir=cache_dir))
    kept, stats_by_family = [], Counter()
    examples = 0
    for task in tasks:
        refs = [next(results) for _ in task.references()]
        trivial = next(results)
        reason = _verdict(refs[0], trivial)
        target = target_from(refs[0].coverage) if reason is None else {}
        if reason is None and meets_target(trivial.coverage, target):
            reason = "trivial_reaches_target"
        if reason:
            rejects[reason] += 1
            detail = (refs[0].detail if reason.startswith("reference") else trivial.detail)[-300:]
            examples_of_rejects.setdefault(reason, f"{task.id}: {detail}")
            continue
        good = [
            path
            for path, result in zip(task.reference_variants, refs[1:])
            if result.status in SCORED_STATUSES and meets_target(result.coverage, target)
        ]
        rejects["variant_dropped"] += len(task.reference_variants) - len(good)
        meta = yaml.safe_load((task.root / "task.yaml").read_text())
        meta["coverage_target"] = target
        meta["variants"] = [str(p.relative_to(task.root)) for p in good]
        for path in set(task.reference_variants) - set(good):
            path.unlink()
        write_meta(task.root, meta)
        final = out_dir / task.id
        shutil.rmtree(final, ignore_errors=True)
        shutil.move(str(task.root), final)
        kept.append(task.id)
        examples += 1 + len(good)
        stats_by_family[task.family] += 1
    shutil.rmtree(staging, ignore_errors=True)
    return {
        "designs": len(jobs),
        "kept": len(kept),
        "examples": examples,
        "rejected": {k: v for k, v in sorted(rejects.items()) if k != "variant_dropped"},
        "variants_dropped": rejects["variant_dropped"],
        "generator_errors": errors,
        "reject_examples": examples_of_rejects,
        "kept_by_family": dict(sorted(stats_by_family.items())),
        "wall_s": round(time.perf_counter() - started, 2),
        "tasks": kept,
    }


def _verdict(reference, trivial) -> str | None:
    """Why a design is rejected, from its primary reference and trivial runs (None: keep)."""
    if reference.status not in SCORED_STATUSES:
        return f"reference_{reference.status}"
    if reference.coverage.get("line", 1.0) < MIN_LINE:  # no line points: continuous assigns only
        return "reference_low_line"
    if trivial.status not in SCORED_STATUSES:
        return f"trivial_{trivial.status}"
    return None
