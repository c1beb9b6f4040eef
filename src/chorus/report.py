"""Aggregate per-sample simulation results into the CHORUS tables and plots.

Input: one row per (model, task_id, sample_id) with at least `passed` (bool) and
`score` (the dense coverage reward). Output: per-task Pass@1 (tasks x models), a summary
(models x Pass@k / mean coverage) with an oracle "best expert per task" row, and the
expert complementarity matrix.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from chorus.metrics import bootstrap_interval, paired_bootstrap_interval, pass_at_k

ORACLE = "oracle/best_expert"
BEST_EXPERT = "best_expert"  # a comparison's reference: the expert of highest Pass@1, once known
# Models compared against the best single expert and the oracle (model id prefixes).
COMPARED_KINDS = ("merge", "consolidated")
COMPARISON_COLUMNS = [
    "best_expert",
    *[f"vs_{ref}{end}" for ref in ("best_expert", "oracle") for end in ("", "_lo", "_hi")],
]
BOOTSTRAP_DEFAULTS = {"resamples": 1000, "confidence": 0.95, "seed": 0}
VERDICT_COLUMNS = ["task_id", "sample_id", "passed", "score", "status"]


def per_sample_table(
    results: list[dict], *, rest: list[str] | None = None, model: str | None = None, sort: bool = False
) -> pd.DataFrame:
    """The per-sample table of scored samples (chorus.harness.score_generations rows):
    ids and verdict first, then a cov_<metric> column per metric seen, then `rest`
    (default: every other column, in the order seen). `sort`: by task and sample id;
    `model`: a leading model column. Mixed integer and string sample ids become strings
    (one type a column, as parquet needs)."""
    coverage = sorted({c for r in results for c in r if c.startswith("cov_")})
    if rest is None:
        seen = dict.fromkeys(c for r in results for c in r)
        rest = [c for c in seen if c not in VERDICT_COLUMNS and c not in coverage]
    table = pd.DataFrame(results, columns=VERDICT_COLUMNS + coverage + rest)
    if len({type(v) for v in table["sample_id"]}) > 1:
        table["sample_id"] = table["sample_id"].astype(str)
    if sort:
        table = table.sort_values(["task_id", "sample_id"])
    if model is not None:
        table.insert(0, "model", model)
    return table


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


def sample_rounds(per_sample: pd.DataFrame) -> list[int]:
    """The coverage-closure rounds a per-sample table has columns for (passed_r<r>);
    empty for a one-round evaluation."""
    return sorted(int(c[len("passed_r"):]) for c in per_sample.columns
                  if c.startswith("passed_r") and c[len("passed_r"):].isdigit())


def round_table(per_sample: pd.DataFrame, bootstrap: dict | None = None) -> pd.DataFrame:
    """Per model and round r: Pass@1 after round r (a sample passes when any round up to
    r passed; the mean over tasks of each task's passing share), its bootstrap interval
    over tasks, and the mean coverage score after round r (each sample's last attempt up
    to r). Empty without round columns."""
    bootstrap = {**BOOTSTRAP_DEFAULTS, **(bootstrap or {})}
    rows = []
    for model, group in per_sample.groupby("model", sort=False):
        for r in sample_rounds(per_sample):
            per_task = group.assign(p=group[f"passed_r{r}"].astype(float)).groupby("task_id")
            pass1, coverage = per_task["p"].mean(), per_task[f"score_r{r}"].mean()
            low, high = bootstrap_interval(pass1, **bootstrap)
            rows.append({"model": model, "round": r, "pass@1": pass1.mean(), "pass@1_lo": low,
                         "pass@1_hi": high, "mean_coverage": coverage.mean(), "tasks": len(pass1)})
    return pd.DataFrame(rows, columns=["model", "round", "pass@1", "pass@1_lo", "pass@1_hi", "mean_coverage", "tasks"])


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
    With coverage-closure rounds (round_table) the main columns are after the last round,
    and pass@1_r<r>, mean_coverage_r<r> follow for each round r.
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
        if compared is None:
            compared = [m for m in per_task.columns if m.split("/")[0] in COMPARED_KINDS]
        compare_to_best_expert([row for row in rows if row["model"] in compared], per_task, present, bootstrap)
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
    summary = pd.DataFrame(rows).reindex(columns=columns)
    for r, at_round in round_table(per_sample, bootstrap).groupby("round"):
        values = at_round.set_index("model")
        summary[f"pass@1_r{r}"] = summary["model"].map(values["pass@1"])
        summary[f"mean_coverage_r{r}"] = summary["model"].map(values["mean_coverage"])
    return summary


def best_of(per_task: pd.DataFrame, experts: list[str]) -> str | None:
    """The expert of highest mean Pass@1 in `per_task` (the first on a tie)."""
    return max(experts, key=lambda e: per_task[e].mean()) if experts else None


def compare_to_best_expert(rows: list[dict], per_task: pd.DataFrame, experts: list[str], bootstrap: dict) -> None:
    """Adds to each row its Pass@1 difference to the best of `experts` (the first wins a
    tie: experts are listed in config order) and to the oracle row, with paired
    bootstrap intervals over the tasks both were evaluated on."""
    best_expert = best_of(per_task, experts)
    for row in rows:
        row["best_expert"] = best_expert
        for name, reference in (("best_expert", best_expert), ("oracle", ORACLE)):
            pair = per_task[[row["model"], reference]].dropna()
            model_values, reference_values = pair.iloc[:, 0], pair.iloc[:, 1]
            row[f"vs_{name}"] = (model_values - reference_values).mean()
            row[f"vs_{name}_lo"], row[f"vs_{name}_hi"] = paired_bootstrap_interval(
                model_values, reference_values, **bootstrap
            )


def comparison_table(per_task: pd.DataFrame, pairs: list[tuple[str, str, str]], experts: list[str],
                     bootstrap: dict | None = None) -> pd.DataFrame:
    """One row per (question, model, reference) of `pairs` (chorus.plan.Plan.comparisons)
    whose two models were both evaluated: their Pass@1 over the tasks both have, the
    difference and its paired bootstrap interval, and the verdict: "higher" or "lower"
    when the interval leaves out 0, else "no difference". `per_task`: per_task_pass1
    with the oracle column; BEST_EXPERT stands for the expert of highest Pass@1 (the
    first in `experts` on a tie), named in the reference column."""
    bootstrap = {**BOOTSTRAP_DEFAULTS, **(bootstrap or {})}
    best = best_of(per_task, [e for e in experts if e in per_task.columns])
    rows = []
    for question, model, reference in pairs:
        reference = best if reference == BEST_EXPERT else reference
        if model not in per_task.columns or reference not in per_task.columns:
            continue
        pair = per_task[[model, reference]].dropna()
        values, baseline = pair[model], pair[reference]
        low, high = paired_bootstrap_interval(values, baseline, **bootstrap)
        verdict = "higher" if low > 0 else "lower" if high < 0 else "no difference"
        rows.append({"question": question, "model": model, "reference": reference, "pass@1": values.mean(),
                     "reference_pass@1": baseline.mean(), "difference": (values - baseline).mean(),
                     "difference_lo": low, "difference_hi": high, "verdict": verdict, "tasks": len(pair)})
    columns = ["question", "model", "reference", "pass@1", "reference_pass@1", "difference", "difference_lo",
               "difference_hi", "verdict", "tasks"]
    return pd.DataFrame(rows, columns=columns)


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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _annotate(ax, values, fmt, white_text) -> None:
    """Write each cell's value into it; white_text(value) says where the cell is dark."""
    for (i, j), value in ((ij, values[ij]) for ij in np.ndindex(values.shape)):
        text = "–" if pd.isna(value) else fmt.format(value)
        colour = "white" if not pd.isna(value) and white_text(value) else "black"
        ax.text(j, i, text, ha="center", va="center", color=colour, fontsize=8)


def heatmap_panels(per_task: pd.DataFrame, coverage: pd.DataFrame | None) -> list[tuple[str, pd.DataFrame]]:
    """(title, table) of each heatmap panel. The coverage panel takes the Pass@1 panel's
    rows and columns in its order (the pipeline's): a column is one model in both."""
    panels = [("Per-task Pass@1", per_task)]
    if coverage is not None:
        aligned = coverage.reindex(index=per_task.index, columns=per_task.columns)
        panels.append(("Per-task mean coverage score", aligned))
    return panels


def plot_heatmap(per_task: pd.DataFrame, path: str, coverage: pd.DataFrame | None = None) -> None:
    """Tasks x models heatmaps of Pass@1 and, below it, the mean coverage score (which
    still separates the models when nothing passes and Pass@1 is 0 everywhere). Each cell
    carries its value; the colour scale is fixed to 0..1 on both."""
    plt = _pyplot()
    panels = heatmap_panels(per_task, coverage)
    height = max(3.0, 0.32 * len(per_task) + 2.5)
    width = max(5.0, 0.6 * len(per_task.columns) + 3.0)
    # one above the other: side by side, the report scales the figure down to unreadable
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, height * len(panels)), squeeze=False)
    for ax, (title, table) in zip(axes[:, 0], panels):
        values = table.to_numpy(dtype=float)
        image = ax.imshow(values, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        _annotate(ax, values, "{:.2f}", white_text=lambda v: v < 0.6)  # viridis is dark below
        ax.set_xticks(range(len(table.columns)), table.columns, rotation=60, ha="right")
        ax.set_yticks(range(len(table.index)), table.index)
        if len(values) and (values[~pd.isna(values)] == 0).all():
            title += "\n(0 for every model and task)"
        ax.set_title(title)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_complementarity(matrix: pd.DataFrame, path: str) -> None:
    """Expert i x expert j: tasks i solves and j does not, as integer counts on a
    discrete scale from 0 to the number of tasks either solves."""
    from matplotlib.colors import BoundaryNorm
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    top = max(1, int(matrix.to_numpy().max()) if matrix.size else 1)
    size = max(4.5, 0.9 * len(matrix) + 3.0)
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    cmap = plt.get_cmap("Blues", top + 1)
    norm = BoundaryNorm([b - 0.5 for b in range(top + 2)], cmap.N)
    image = ax.imshow(matrix.to_numpy(dtype=float), cmap=cmap, norm=norm)
    _annotate(ax, matrix.to_numpy(dtype=float), "{:.0f}", white_text=lambda v: v > top / 2)
    ax.set_xticks(range(len(matrix.columns)), matrix.columns, rotation=45, ha="right")
    ax.set_yticks(range(len(matrix.index)), matrix.index)
    ax.set_xlabel("expert j (does not solve)")
    ax.set_ylabel("expert i (solves)")
    ax.set_title("Tasks solved by expert i but not by j", pad=12)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="tasks")
    bar.locator = MaxNLocator(integer=True)
    bar.update_ticks()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_coverage_distribution(per_sample: pd.DataFrame, path: str) -> None:
    """Per model, the distribution of the samples' coverage score (the dense reward):
    a box per model with every sample as a dot."""
    plt = _pyplot()
    models = list(dict.fromkeys(per_sample["model"]))
    width = max(6.0, 0.6 * len(models) + 2.5)
    fig, ax = plt.subplots(figsize=(width, 4.5))
    data = [per_sample.loc[per_sample["model"] == m, "score"].astype(float).to_numpy() for m in models]
    ax.boxplot(data, showfliers=False)
    for i, values in enumerate(data, start=1):
        jitter = [i + 0.15 * ((k % 7) - 3) / 3 for k in range(len(values))]
        ax.scatter(jitter, values, s=8, alpha=0.5, color="tab:blue")
    ax.set_xticks(range(1, len(models) + 1), models, rotation=60, ha="right")
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("coverage score")
    ax.set_title("Coverage score of every evaluated sample")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_rounds(per_sample: pd.DataFrame, path: str, bootstrap: dict | None = None) -> None:
    """Per model, Pass@1 after each coverage-closure round with its bootstrap interval
    over tasks, and the mean coverage score after each round (round_table)."""
    plt = _pyplot()
    curve = round_table(per_sample, bootstrap)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for model, rows in curve.groupby("model", sort=False):
        errors = [rows["pass@1"] - rows["pass@1_lo"], rows["pass@1_hi"] - rows["pass@1"]]
        left.errorbar(rows["round"], rows["pass@1"], yerr=errors, marker="o", capsize=3, label=model)
        right.plot(rows["round"], rows["mean_coverage"], marker="o", label=model)
    for ax, label in ((left, "Pass@1 (passed in any round so far)"), (right, "mean coverage score")):
        ax.set_xlabel("round")
        ax.set_ylabel(label)
        ax.set_xticks(sorted(curve["round"].unique()))
        ax.set_ylim(-0.05, 1.05)
    left.set_title("Pass@1 after each round (95% interval over tasks)")
    right.set_title("Mean coverage after each round")
    right.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# the training-curve panels: title, y label, curve set ("sft"/"rl"), the line key and
# the columns drawn (the first solid, the others dashed)
TRAINING_PANELS = [
    ("SFT loss per stage", "loss", "sft", "stage", ["loss"]),
    ("GRPO mean reward (terms dashed)", "reward", "rl", "expert", ["reward"]),
    ("GRPO reward spread within groups", "reward std", "rl", "expert", ["reward_std"]),
    ("Completion length (max dashed)", "tokens", "rl", "expert",
     ["completions/mean_length", "completions/max_length"]),
    ("Completions cut at the length cap", "fraction", "rl", "expert", ["completions/clipped_ratio"]),
    ("GRPO KL to the reference", "kl", "rl", "expert", ["kl"]),
]


def _draw_curves(ax, frame: pd.DataFrame, key: str, columns: list[str]) -> bool:
    """One colour per stage/expert: the first column solid with markers, the others
    dashed. False when none of the columns was logged."""
    plotted = False
    for n, (name, group) in enumerate(frame.groupby(key, sort=False) if key in frame else []):
        for i, column in enumerate(c for c in columns if c in group and group[c].notna().any()):
            label = name if i == 0 else f"{name}: {column.removeprefix('rewards/').removesuffix('/mean')}"
            style = dict(linestyle="-", marker="o", markersize=3) if i == 0 else dict(linestyle="--", linewidth=1.2)
            ax.plot(group["step"], group[column], color=f"C{n % 10}", label=label, **style)
            plotted = True
    return plotted


def plot_training_curves(curves: dict[str, pd.DataFrame], path: str) -> dict[str, list[tuple[str, str]]]:
    """SFT loss per stage; per GRPO expert the mean reward with its terms (coverage and
    format, dashed), the reward spread within the groups, completion lengths, the
    fraction of completions cut at the length cap and the KL: the first signs of looping
    answers or collapse beside the reward. One panel each, from the metrics the training
    jobs wrote. Returns each panel's drawn lines as (label, line style)."""
    from matplotlib.ticker import MaxNLocator

    plt = _pyplot()
    rl = curves["rl"]
    terms = [c for c in rl.columns if c.startswith("rewards/") and c.endswith("/mean")]
    fig, axes = plt.subplots(2, 3, figsize=(15.0, 8.0))
    for ax, (title, ylabel, which, key, columns) in zip(axes.flat, TRAINING_PANELS):
        columns = [*columns, *terms] if ylabel == "reward" else columns
        if _draw_curves(ax, curves[which], key, columns):
            ax.legend(fontsize=7)
        else:
            why = "\n(TRL logs it only when rl.beta > 0)" if ylabel == "kl" else ""
            ax.text(0.5, 0.5, f"no {columns[0]} logged{why}", ha="center", va="center", transform=ax.transAxes)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
    drawn = {ax.get_title(): [(line.get_label(), line.get_linestyle()) for line in ax.lines] for ax in axes.flat}
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return drawn
