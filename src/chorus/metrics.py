"""Pass@k, by the unbiased estimator of Chen et al. (2021), and per-task aggregation."""

from __future__ import annotations

import math


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples, drawn without replacement from n
    samples of which c pass, passes: 1 - C(n-c, k) / C(n, k), as a stable product."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def per_task_metrics(per_sample, ks=(1,)):
    """Per-task table from a per-sample DataFrame (task_id, passed, score[, model]):
    n (samples), c (passing), pass@k for each k in `ks` (NaN where n < k) and
    mean_coverage (mean dense score). Grouped by model too when there is a model column."""
    import pandas as pd

    keys = ["model", "task_id"] if "model" in per_sample.columns else ["task_id"]
    frame = per_sample.assign(passed=per_sample["passed"].astype(bool).astype(int))
    grouped = frame.groupby(keys, sort=True).agg(
        n=("passed", "size"), c=("passed", "sum"), mean_coverage=("score", "mean")
    )
    table = grouped.reset_index()
    for k in ks:
        table[f"pass@{k}"] = [
            pass_at_k(int(n), int(c), k) if n >= k else float("nan") for n, c in zip(table["n"], table["c"])
        ]
    columns = [*keys, "n", "c", *[f"pass@{k}" for k in ks], "mean_coverage"]
    return pd.DataFrame(table, columns=columns)


def bootstrap_interval(
    values, *, resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-task `values`: draw the tasks
    with replacement `resamples` times (seeded) and take the central `confidence` share
    of the resampled means. Empty input gives (nan, nan)."""
    import numpy as np

    values = np.asarray(values, dtype=float)
    if resamples < 1 or not 0 < confidence < 1:
        raise ValueError(f"need resamples >= 1 and 0 < confidence < 1, got {resamples}, {confidence}")
    if values.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 4_000_000 // values.size)  # bounds the index matrix to ~32 MB
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        means[start:stop] = values[rng.integers(0, values.size, size=(stop - start, values.size))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return float(low), float(high)


def paired_bootstrap_interval(
    values, baseline, *, resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Bootstrap interval of mean(values - baseline) over tasks, both models resampled
    on the same tasks (the i-th entries of both are the same task): per-task differences
    shared by the two models cancel, so the interval is much narrower than the two
    separate intervals suggest when the models succeed on similar tasks."""
    import numpy as np

    values, baseline = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    if values.shape != baseline.shape:
        raise ValueError(f"paired values need the same tasks, got {values.shape} and {baseline.shape}")
    return bootstrap_interval(values - baseline, resamples=resamples, confidence=confidence, seed=seed)
