"""Tables and HTML pages of the Snakemake report, from the per-sample results.

Every function takes the per-sample table (one row per model, task and sample: passed,
score, status, cov_<metric>, ...) and returns a DataFrame; `html_page` renders tables
with captions as one self-contained HTML page (the report shows it inline). Columns
another step adds (interval columns of the summary, a task `family`) are shown when
present and skipped when absent.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

import pandas as pd

from chorus.plan import replica_group
from chorus.report import ORACLE

PASS1 = "pass@1"


# -- per-model breakdowns --------------------------------------------------------------
def status_breakdown(per_sample: pd.DataFrame) -> pd.DataFrame:
    """Models x status: the number of samples that ended in each status (ok,
    below_target, syntax_error, timeout, ...), most frequent status first."""
    table = pd.crosstab(per_sample["model"], per_sample["status"])
    table = table.reindex(index=list(dict.fromkeys(per_sample["model"])))
    order = table.sum().sort_values(ascending=False).index
    table = table[order]
    table["samples"] = table.sum(axis=1)
    table.columns.name = None
    return table


def coverage_by_metric(per_sample: pd.DataFrame) -> pd.DataFrame:
    """Models x coverage metric: mean achieved coverage (line, branch, toggle, expr,
    user) over all samples, and the mean dense score."""
    metrics = [c for c in per_sample.columns if c.startswith("cov_")]
    table = per_sample.groupby("model", sort=False)[[*metrics, "score"]].mean()
    return table.rename(columns=lambda c: c.removeprefix("cov_")).rename(columns={"score": "mean score"})


def task_attributes(tasks) -> pd.DataFrame:
    """task_id -> difficulty and, when tasks carry one, family (synthetic corpora)."""
    rows = [
        {"task_id": t.id, "difficulty": t.difficulty, "family": getattr(t, "family", None)}
        for t in tasks
    ]
    table = pd.DataFrame(rows, columns=["task_id", "difficulty", "family"]).set_index("task_id")
    if table["family"].isna().all():
        table = table.drop(columns="family")
    return table


def pass1_by(per_sample: pd.DataFrame, attributes: pd.DataFrame, column: str) -> pd.DataFrame | None:
    """Models x values of a task attribute (difficulty, family): mean over tasks of the
    per-task Pass@1, with the task count in the header. None without that attribute."""
    if column not in attributes.columns:
        return None
    per_task = per_sample.assign(passed=per_sample["passed"].astype(float)).groupby(
        ["model", "task_id"], sort=False
    )["passed"].mean().reset_index()
    per_task[column] = per_task["task_id"].map(attributes[column]).fillna("(none)")
    table = per_task.pivot_table(index="model", columns=column, values="passed", aggfunc="mean")
    table = table.reindex(index=list(dict.fromkeys(per_sample["model"])))
    rank = {"easy": 0, "medium": 1, "hard": 2}  # difficulties in their order, others by name
    table = table[sorted(table.columns, key=lambda c: (rank.get(c, 3), str(c)))]
    counts = per_task.drop_duplicates("task_id")[column].value_counts()
    table.columns = [f"{c} ({counts.get(c, 0)} tasks)" for c in table.columns]
    return table


# -- expert complementarity ------------------------------------------------------------
def _solved(per_sample: pd.DataFrame, experts: list[str]) -> pd.DataFrame:
    """Tasks x experts: per-task Pass@1 of each expert present."""
    present = [e for e in experts if e in set(per_sample["model"])]
    frame = per_sample[per_sample["model"].isin(present)]
    table = frame.assign(passed=frame["passed"].astype(float)).pivot_table(
        index="task_id", columns="model", values="passed", aggfunc="mean"
    )
    return table.reindex(columns=present)


def task_winners(per_sample: pd.DataFrame, experts: list[str]) -> pd.DataFrame:
    """Per task: each expert's Pass@1, the best expert(s) and the best value ('-' where
    no expert passes any sample)."""
    table = _solved(per_sample, experts)
    best = table.max(axis=1)
    winners = [
        ", ".join(c for c in table.columns if row[c] == top) if top > 0 else "-"
        for (_, row), top in zip(table.iterrows(), best)
    ]
    table = table.copy()
    table["best"] = best
    table["winner"] = winners
    table.columns.name = None
    return table


def pairwise_disagreement(per_sample: pd.DataFrame, experts: list[str]) -> pd.DataFrame:
    """Experts x experts: fraction of tasks that exactly one of the two solves (a task is
    solved with at least one passing sample). 0: identical strengths."""
    solved = _solved(per_sample, experts) > 0
    names = list(solved.columns)
    matrix = pd.DataFrame(0.0, index=names, columns=names)
    for i in names:
        for j in names:
            matrix.loc[i, j] = float((solved[i] != solved[j]).mean()) if len(solved) else math.nan
    return matrix


def oracle_gap(summary: pd.DataFrame, experts: list[str]) -> pd.DataFrame:
    """Per expert: its Pass@1, the per-task best expert's (oracle) Pass@1 and the gap
    between them: what a perfect choice of expert per task would add."""
    by_model = summary.set_index("model")
    if ORACLE not in by_model.index or PASS1 not in by_model.columns:
        return pd.DataFrame(columns=[PASS1, "oracle pass@1", "gap"])
    oracle = by_model.loc[ORACLE, PASS1]
    rows = {
        e: {PASS1: by_model.loc[e, PASS1], "oracle pass@1": oracle, "gap": oracle - by_model.loc[e, PASS1]}
        for e in experts
        if e in by_model.index
    }
    return pd.DataFrame.from_dict(rows, orient="index")


# -- seeds -----------------------------------------------------------------------------
def t_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean and two-sided Student-t confidence interval of the mean (NaN bounds for one
    value)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def seed_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per model over its seed replicates (rl/e, rl/e.seed1, ...): seeds, and for
    each pass@k and mean_coverage the mean and 95% t-interval over the seeds."""
    metrics = [c for c in summary.columns if c.startswith("pass@") and "_" not in c]  # no interval columns
    metrics += ["mean_coverage"]
    frame = summary[summary["model"] != ORACLE].assign(group=lambda f: f["model"].map(replica_group))
    rows = []
    for group, replicas in frame.groupby("group", sort=False):
        row = {"model": group, "seeds": len(replicas)}
        for metric in metrics:
            mean, low, high = t_interval(replicas[metric].astype(float).tolist())
            row[metric] = mean
            row[f"{metric} 95% low"] = low
            row[f"{metric} 95% high"] = high
        rows.append(row)
    return pd.DataFrame(rows)


# -- run status ------------------------------------------------------------------------
def run_status(per_sample: pd.DataFrame) -> dict:
    """Samples, passing samples and, when every sample failed, the dominant status."""
    statuses = per_sample["status"].value_counts()
    passing = int(per_sample["passed"].astype(bool).sum())
    status = {"samples": len(per_sample), "passing": passing, "statuses": statuses.to_dict()}
    if passing == 0 and len(per_sample):
        status["dominant_failure"] = str(statuses.index[0])
        status["dominant_share"] = float(statuses.iloc[0] / len(per_sample))
    return status


def banner_html(status: dict, pointer: bool = True) -> str:
    """The report's first-page banner: a red box when every sample failed, naming the
    dominant failure; otherwise one line with the passing count. `pointer`: add where
    the per-model statuses are."""
    if "dominant_failure" in status:
        return (
            '<div style="border:2px solid #b00020;background:#fdecea;padding:0.8em;'
            'margin:0.5em 0;font-weight:bold">'
            f"Every one of the {status['samples']} evaluated samples failed. Dominant "
            f"failure: {html.escape(status['dominant_failure'])} "
            f"({status['dominant_share']:.0%} of samples)."
            + (" Tables / overview.html shows the status of every model." if pointer else "")
            + "</div>"
        )
    return (
        f"<p>{status['passing']} of {status['samples']} evaluated samples passed their "
        "coverage target.</p>"
    )


# -- training curves -------------------------------------------------------------------
def training_curves(sft_dirs: dict[str, str], rl_dirs: dict[str, str]) -> dict[str, pd.DataFrame]:
    """Curves from the metrics the training jobs write: `sft` (stage, step, loss) from
    train_metrics.json and `rl` (expert, step, reward terms, kl) from rl_metrics.json."""
    sft_rows, rl_rows = [], []
    for stage, folder in sft_dirs.items():
        path = Path(folder) / "train_metrics.json"
        if path.exists():
            losses = json.loads(path.read_text()).get("losses", [])
            sft_rows += [{"stage": stage, "step": i + 1, "loss": v} for i, v in enumerate(losses)]
    for expert, folder in rl_dirs.items():
        path = Path(folder) / "rl_metrics.json"
        if path.exists():
            for entry in json.loads(path.read_text()).get("rewards_per_step", []):
                rl_rows.append({"expert": expert, **entry})
    return {"sft": pd.DataFrame(sft_rows), "rl": pd.DataFrame(rl_rows)}


# -- HTML ------------------------------------------------------------------------------
STYLE = """
body{font-family:system-ui,sans-serif;font-size:14px;margin:1em;color:#222}
table{border-collapse:collapse;margin:0.3em 0 1.5em 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f0f0f0;cursor:pointer}
td:first-child,th:first-child{text-align:left}
caption{caption-side:top;text-align:left;font-weight:bold;padding:0.3em 0;white-space:nowrap}
p.note{color:#555;max-width:60em}
"""

# click a header to sort by that column (the report shows the page in an iframe)
SORT_SCRIPT = """
document.querySelectorAll("table").forEach(t => t.querySelectorAll("th").forEach((th, i) =>
  th.addEventListener("click", () => {
    const body = t.tBodies[0], rows = Array.from(body.rows), asc = th.dataset.asc !== "1";
    const key = r => { const v = r.cells[i].innerText; const n = parseFloat(v); return isNaN(n) ? v : n; };
    rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (asc ? 1 : -1));
    th.dataset.asc = asc ? "1" : "0"; rows.forEach(r => body.appendChild(r));
  })));
"""


def with_intervals(table: pd.DataFrame) -> pd.DataFrame:
    """Join a metric and its interval columns into one cell '0.50 [0.25, 0.75]' when the
    table has them (e.g. bootstrap columns `pass@1_low`/`pass@1_high` or `... 95% low`)."""
    table = table.copy()
    for column in list(table.columns):
        for low_suffix, high_suffix in (("_low", "_high"), ("_lo", "_hi"), (" 95% low", " 95% high"), ("_ci_low", "_ci_high")):
            low, high = f"{column}{low_suffix}", f"{column}{high_suffix}"
            if low in table.columns and high in table.columns:
                table[column] = [
                    _fmt(v) if pd.isna(lo) or pd.isna(hi) else f"{_fmt(v)} [{_fmt(lo)}, {_fmt(hi)}]"
                    for v, lo, hi in zip(table[column], table[low], table[high])
                ]
                table = table.drop(columns=[low, high])
    return table


def _fmt(value) -> str:
    if isinstance(value, float):
        return "–" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def table_html(table: pd.DataFrame, caption: str, note: str = "", index: bool = True) -> str:
    table = with_intervals(table)
    if index:  # the index as the first column: one header row, not a row for its name
        table = table.reset_index().rename(columns={"index": ""})
    body = table.to_html(index=False, float_format=_fmt, na_rep="–", border=0, escape=True)
    body = re.sub(r"<table[^>]*>", f"<table><caption>{html.escape(caption)}</caption>", body, count=1)
    return body + (f'<p class="note">{html.escape(note)}</p>' if note else "")


def html_page(title: str, sections: list[str]) -> str:
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body><h2>{html.escape(title)}</h2>"
        + "\n".join(sections)
        + f"<script>{SORT_SCRIPT}</script></body></html>\n"
    )
