"""Aggregate per-sample simulation results into the CHORUS tables and plots.

Input: one row per (model, task_id, sample_id) with at least `passed` (bool) and
`score` (the dense coverage reward). Output: per-task Pass@1 (tasks x models), a summary
(models x Pass@k / mean coverage) with an oracle "best expert per task" row, and the
expert complementarity matrix.
"""

from __future__ import annotations

import pandas as pd

from chorus.metrics import bootstrap_interval, paired_bootstrap_interval, pass_at_k

ORACLE = "oracle/best_expert"
# Models compared against the best single expert and the oracle (model id prefixes).
COMPARED_KINDS = ("merge", "consolidated")
COMPARISON_COLUMNS = [
    "best_expert",
    *[f"vs_{ref}{end}" for ref in ("best_expert", "oracle") for end in ("", "_lo", "_hi")],
]
BOOTSTRAP_DEFAULTS = {"resamples": 1000, "confidence": 0.95, "seed": 0}


def per_task_pass1(per_sample: pd.DataFrame, experts: list[str] | None = None) -> pd.DataFrame:
    """Tasks x models table of Pass@1 (unbiased over the k samples: passing / k).

    With `experts`, an oracle column takes for each task the best of those models.
    """
    table = (
        per_sample.assign(passed=per_sample["passed"].astype(float))
        .pivot_table(index="task_id", columns="model", values="passed", aggfunc="mean")
        .reindex(columns=list(dict.fromkeys(per_sample["model"])))
    )
    table.columns.name = None
    present = [e for e in (experts or []) if e in table.columns]
    if present:
        table[ORACLE] = table[present].max(axis=1)
    return table.sort_index()


def per_task_counts(per_sample: pd.DataFrame) -> pd.DataFrame:
    """Per (model, task): samples n, passing samples c, mean coverage score."""
    grouped = per_sample.groupby(["model", "task_id"], sort=False)
    return grouped.agg(
        n=("passed", "size"), c=("passed", "sum"), mean_score=("score", "mean")
    ).reset_index()


def summary_table(
    per_sample: pd.DataFrame,
    pass_at: list[int],
    experts: list[str] | None = None,
    *,
    compared: list[str] | None = None,
    bootstrap: dict | None = None,
) -> pd.DataFrame:
    """Models x {pass@k for k in pass_at, the 95% bootstrap interval of Pass@1 over tasks
    (pass@1_lo, pass@1_hi), mean_coverage, tasks, samples}, plus the oracle row.

    Each model in `compared` (default: the merge/ and consolidated/ models) also gets
    its Pass@1 difference to the best single expert (highest Pass@1 among `experts`,
    named in best_expert) and to the oracle row, each with its paired bootstrap
    interval (both models resampled on the same tasks): vs_best_expert[_lo|_hi],
    vs_oracle[_lo|_hi]. `bootstrap`: resamples, confidence, seed (metrics.bootstrap_interval).
    """
    bootstrap = {**BOOTSTRAP_DEFAULTS, **(bootstrap or {})}
    pass_at = list(pass_at) if 1 in pass_at else [1, *pass_at]  # the intervals are Pass@1's
    counts = per_task_counts(per_sample)
    per_task = per_task_pass1(per_sample, experts)
    rows = []
    for model, group in counts.groupby("model", sort=False):
        row = {"model": model, "tasks": len(group), "samples": int(group["n"].sum())}
        for k in pass_at:
            values = [
                pass_at_k(int(n), int(c), k) for n, c in zip(group["n"], group["c"]) if n >= k
            ]
            row[f"pass@{k}"] = sum(values) / len(values) if len(values) == len(group) else float("nan")
        row["mean_coverage"] = group["mean_score"].mean()
        rows.append(row)
    present = [e for e in (experts or []) if e in set(counts["model"])]
    if present:
        best = counts[counts["model"].isin(present)].copy()
        best["pass1"] = best["c"] / best["n"]
        oracle = best.groupby("task_id").agg(pass1=("pass1", "max"), score=("mean_score", "max"))
        rows.append(
            {
                "model": ORACLE,
                "tasks": len(oracle),
                "samples": 0,
                "pass@1": oracle["pass1"].mean(),
                "mean_coverage": oracle["score"].mean(),
            }
        )
    for row in rows:
        row["pass@1_lo"], row["pass@1_hi"] = bootstrap_interval(per_task[row["model"]].dropna(), **bootstrap)
    if present:
        # the first expert wins a tie: experts are listed in config order
        best_expert = max(present, key=lambda e: per_task[e].mean())
        if compared is None:
            compared = [m for m in per_task.columns if m.split("/")[0] in COMPARED_KINDS]
        for row in rows:
            if row["model"] not in compared:
                continue
            row["best_expert"] = best_expert
            for name, reference in (("best_expert", best_expert), ("oracle", ORACLE)):
                pair = per_task[[row["model"], reference]].dropna()
                model_values, reference_values = pair.iloc[:, 0], pair.iloc[:, 1]
                row[f"vs_{name}"] = (model_values - reference_values).mean()
                row[f"vs_{name}_lo"], row[f"vs_{name}_hi"] = paired_bootstrap_interval(
                    model_values, reference_values, **bootstrap
                )
    columns = [
        "model",
        *[f"pass@{k}" for k in pass_at],
        "pass@1_lo",
        "pass@1_hi",
        "mean_coverage",
        "tasks",
        "samples",
        *COMPARISON_COLUMNS,
    ]
    return pd.DataFrame(rows).reindex(columns=columns)


def complementarity(per_sample: pd.DataFrame, experts: list[str]) -> pd.DataFrame:
    """Cell (i, j): tasks that expert i solves (any passing sample) and expert j does not."""
    solved = (
        per_sample[per_sample["model"].isin(experts)]
        .groupby(["model", "task_id"])["passed"]
        .any()
        .unstack(fill_value=False)
    )
    present = [e for e in experts if e in solved.index]
    matrix = pd.DataFrame(0, index=present, columns=present, dtype=int)
    for i in present:
        for j in present:
            matrix.loc[i, j] = int((solved.loc[i] & ~solved.loc[j]).sum())
    return matrix


def plot_heatmap(per_task: pd.DataFrame, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = max(3.0, 0.3 * len(per_task) + 1.5)
    width = max(5.0, 0.55 * len(per_task.columns) + 3.0)
    fig, ax = plt.subplots(figsize=(width, height))
    image = ax.imshow(per_task.to_numpy(dtype=float), vmin=0, vmax=1, cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(per_task.columns)), per_task.columns, rotation=60, ha="right")
    ax.set_yticks(range(len(per_task.index)), per_task.index)
    ax.set_title("Per-task Pass@1")
    fig.colorbar(image, ax=ax, label="Pass@1")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_complementarity(matrix: pd.DataFrame, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(4.0, 0.8 * len(matrix) + 2.5)
    fig, ax = plt.subplots(figsize=(size, size))
    image = ax.imshow(matrix.to_numpy(dtype=float), cmap="magma")
    ax.set_xticks(range(len(matrix.columns)), matrix.columns, rotation=60, ha="right")
    ax.set_yticks(range(len(matrix.index)), matrix.index)
    for (i, j), value in pd.DataFrame(matrix.to_numpy()).stack().items():
        ax.text(j, i, str(value), ha="center", va="center", color="white")
    ax.set_xlabel("expert j (does not solve)")
    ax.set_ylabel("expert i (solves)")
    ax.set_title("Tasks solved by i but not by j")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
