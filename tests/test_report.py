"""The report's tables and plots (chorus.report_pages, chorus.report) on a small
per-sample table, and the Snakemake report of a finished run."""

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from chorus import report, report_pages as pages
from conftest import FIXTURE_TASK, REPO

EXPERTS = ["rl/a", "rl/b"]


def sample_table() -> pd.DataFrame:
    """Two tasks x two samples for a base model and two experts: expert a solves t1,
    expert b solves t2, the base model solves nothing."""
    rows = []
    outcomes = {
        "base/base": {"t1": [0, 0], "t2": [0, 0]},
        "rl/a": {"t1": [1, 0], "t2": [0, 0]},
        "rl/b": {"t1": [0, 0], "t2": [1, 1]},
    }
    for model, tasks in outcomes.items():
        for task, passes in tasks.items():
            for sample, passed in enumerate(passes):
                rows.append({
                    "model": model, "task_id": task, "sample_id": sample, "passed": bool(passed),
                    "score": 1.0 if passed else 0.25, "status": "ok" if passed else "below_target",
                    "cov_line": 1.0 if passed else 0.5, "cov_branch": 1.0 if passed else 0.0,
                })
    return pd.DataFrame(rows)


class FakeTask:
    def __init__(self, id, difficulty, family=None):
        self.id, self.difficulty = id, difficulty
        if family is not None:
            self.family = family


def test_status_and_coverage_breakdowns():
    per_sample = sample_table()
    status = pages.status_breakdown(per_sample)
    assert status.loc["base/base", "below_target"] == 4 and status.loc["rl/b", "ok"] == 2
    assert (status["samples"] == 4).all()
    coverage = pages.coverage_by_metric(per_sample)
    assert coverage.loc["rl/b", "line"] == pytest.approx(0.75)
    assert coverage.loc["base/base", "branch"] == 0.0
    assert list(coverage.columns) == ["line", "branch", "mean score"]


def test_pass1_per_difficulty_and_optional_family():
    per_sample = sample_table()
    plain = pages.task_attributes([FakeTask("t1", "easy"), FakeTask("t2", "hard")])
    assert "family" not in plain.columns and pages.pass1_by(per_sample, plain, "family") is None
    by_difficulty = pages.pass1_by(per_sample, plain, "difficulty")
    assert by_difficulty.loc["rl/a", "easy (1 tasks)"] == 0.5
    assert by_difficulty.loc["rl/b", "hard (1 tasks)"] == 1.0
    families = pages.task_attributes([FakeTask("t1", "easy", "fifo"), FakeTask("t2", "hard", "fsm")])
    assert pages.pass1_by(per_sample, families, "family").loc["rl/b", "fsm (1 tasks)"] == 1.0


def test_complementarity_tables():
    per_sample = sample_table()
    winners = pages.task_winners(per_sample, EXPERTS)
    assert winners.loc["t1", "winner"] == "rl/a" and winners.loc["t2", "winner"] == "rl/b"
    disagreement = pages.pairwise_disagreement(per_sample, EXPERTS)
    assert disagreement.loc["rl/a", "rl/b"] == 1.0 and disagreement.loc["rl/a", "rl/a"] == 0.0
    summary = report.summary_table(per_sample, [1], EXPERTS)
    gap = pages.oracle_gap(summary, EXPERTS)
    # oracle: t1 0.5 (a), t2 1.0 (b) -> 0.75; a alone 0.25, b alone 0.5
    assert gap.loc["rl/a", "gap"] == pytest.approx(0.5) and gap.loc["rl/b", "gap"] == pytest.approx(0.25)


def test_comparisons_pair_each_model_with_its_reference_on_the_same_tasks():
    # twenty tasks: the SFT model passes the first 5, rl/a the first 15, rl/b the last one,
    # the merge all of them; rl/gone was not evaluated
    passes = {"sft/s": range(5), "rl/a": range(15), "rl/b": [19], "merge/m": range(20)}
    per_sample = pd.DataFrame([{"model": m, "task_id": f"t{i:02d}", "sample_id": 0, "passed": i in passed,
                                "score": float(i in passed)} for m, passed in passes.items() for i in range(20)])
    per_task = report.per_task_pass1(per_sample, EXPERTS)
    pairs = [("stage", "rl/a", "sft/s"), ("stage", "rl/gone", "sft/s"), ("stage", "sft/s", "rl/a"),
             ("complementarity", report.ORACLE, report.BEST_EXPERT),
             ("consolidation", "merge/m", report.BEST_EXPERT)]
    table = report.comparison_table(per_task, pairs, EXPERTS, bootstrap={"resamples": 1000})
    assert list(table["model"]) == ["rl/a", "sft/s", report.ORACLE, "merge/m"]
    assert (table["tasks"] == 20).all()
    gain = table.iloc[0]
    assert (gain["pass@1"], gain["reference_pass@1"], gain["difference"]) == (0.75, 0.25, 0.5)
    # ten tasks gained, none lost: the paired interval lies above 0
    assert 0 < gain["difference_lo"] < 0.5 < gain["difference_hi"] < 1 and gain["verdict"] == "higher"
    assert table.iloc[1]["difference"] == -0.5 and table.iloc[1]["verdict"] == "lower"
    # the best expert is rl/a; the oracle adds one task, which a resample often leaves out
    assert set(table.loc[table["question"] != "stage", "reference"]) == {"rl/a"}
    oracle = table.iloc[2]
    assert oracle["difference"] == 0.05 and oracle["difference_lo"] == 0 and oracle["verdict"] == "no difference"
    assert table.iloc[3]["difference"] == 0.25 and table.iloc[3]["verdict"] == "higher"


def test_seed_summary_interval_and_interval_columns_render():
    summary = pd.DataFrame({
        "model": ["rl/a", "rl/a.seed1", "rl/a.seed2", "base/base"],
        "pass@1": [0.2, 0.4, 0.3, 0.0],
        "mean_coverage": [0.5, 0.5, 0.5, 0.1],
    })
    seeds = pages.seed_summary(summary).set_index("model")
    assert seeds.loc["rl/a", "seeds"] == 3 and seeds.loc["rl/a", "pass@1"] == pytest.approx(0.3)
    # t(0.975, 2) * 0.1 / sqrt(3) = 4.303 * 0.0577
    assert seeds.loc["rl/a", "pass@1 95% high"] == pytest.approx(0.3 + 0.2484, abs=1e-3)
    assert math.isnan(seeds.loc["base/base", "pass@1 95% low"])
    html = pages.table_html(seeds, "Seeds")
    assert "0.300 [0.052, 0.548]" in html and "95% low" not in html
    # bootstrap columns of the summary (another step adds them) render the same way
    summary["pass@1_low"], summary["pass@1_high"] = 0.1, 0.5
    assert "[0.100, 0.500]" in pages.table_html(summary, "Summary")


def test_banner_names_the_dominant_failure():
    per_sample = sample_table()
    assert "failed" not in pages.banner_html(pages.run_status(per_sample))
    failed = per_sample.assign(passed=False, status=["syntax_error"] * 10 + ["timeout"] * 2)
    status = pages.run_status(failed)
    assert status["dominant_failure"] == "syntax_error"
    banner = pages.banner_html(status)
    assert "Every one of the 12" in banner and "syntax_error" in banner and "83%" in banner


def test_plots_are_written(tmp_path):
    per_sample = sample_table()
    per_task = report.per_task_pass1(per_sample, EXPERTS)
    coverage = per_sample.pivot_table(index="task_id", columns="model", values="score")
    report.plot_heatmap(per_task, tmp_path / "heatmap.png", coverage=coverage)
    report.plot_complementarity(report.complementarity(per_sample, EXPERTS), tmp_path / "comp.png")
    report.plot_coverage_distribution(per_sample, tmp_path / "cov.png")
    curves = {
        "sft": pd.DataFrame({"stage": ["s"] * 3, "step": [1, 2, 3], "loss": [3.0, 2.0, 1.5]}),
        "rl": pd.DataFrame({"expert": ["a"] * 2, "step": [1, 2], "reward": [0.1, 0.2],
                            "rewards/coverage_reward/mean": [0.1, 0.2], "kl": [0.0, 0.01]}),
    }
    drawn = report.plot_training_curves(curves, tmp_path / "curves.png")
    # the mean reward solid, its terms dashed, as the caption says
    assert ("a", "-") in drawn["GRPO mean reward (terms dashed)"]
    assert ("a: coverage_reward", "--") in drawn["GRPO mean reward (terms dashed)"]
    empty = {"sft": pd.DataFrame(), "rl": pd.DataFrame()}
    report.plot_training_curves(empty, tmp_path / "empty.png")
    for name in ("heatmap", "comp", "cov", "curves", "empty"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_snakemake_report_of_a_run_has_the_sections(local_run, local_run_report):
    """The report of the local run: first-page status and provenance, labelled HTML tables
    with the overview first, the per-sample page, plots."""
    text = local_run_report.read_text()
    for name in ("overview.html", "samples.html", "breakdown.html", "complementarity.html", "seeds.html",
                 "provenance.html", "per_task_heatmap.png", "expert_complementarity.png",
                 "coverage_distribution.png", "training_curves.png"):
        assert name in text, name
    # the first page: the run's status line (or the all-failed banner), the provenance,
    # and no rule graph
    assert "evaluated samples" in text and "Wall time per stage" in text and "Package versions" in text
    assert "#rulegraph{display:none}" in text
    # items are labelled (the report sorts by label: the overview first), none under "Other"
    results = json.loads(re.search(r"var results = (\{.*?\});\n", text).group(1))
    labels = {Path(path).name: item["labels"] for path, item in results.items()}
    assert labels["overview.html"] == {"table": "1 Overview: Pass@k, statuses, coverage per metric"}
    assert sorted(v["table"] for v in labels.values() if "table" in v)[0].startswith("1 Overview")
    categories = json.loads(re.search(r"var categories = (\{.*?\});\n", text).group(1))
    assert all("Other" not in subcategories for subcategories in categories.values()), categories
    report_dir = local_run / "results" / "report"
    overview = (report_dir / "overview.html").read_text()
    for heading in ("Summary: Pass@k", "study&#x27;s questions: paired comparisons", "Samples per status",
                    "Mean coverage per metric"):
        assert heading in overview
    assert '"completion"' in (report_dir / "samples.html").read_text()


def test_progress_lines_count_rate_and_time_left(caplog):
    from chorus.io import Progress

    now = [0.0]
    progress = Progress("scored samples", 10, every_s=5, clock=lambda: now[0])
    with caplog.at_level("INFO", logger="chorus.progress"):
        for _ in range(10):
            now[0] += 1.0
            progress.update()
    lines = [r.getMessage() for r in caplog.records]
    # the first item, then every 5 s of the (fake) clock, and the last item
    assert lines[0] == "scored samples: 1/10 (10%), 1.00/s, ~9 s left"
    assert lines[-1] == "scored samples: 10/10 (100%), 1.00/s"
    assert len(lines) == 3


def test_compare_runs_side_by_side(tmp_path):
    from chorus.compare import compare_runs

    for run, value in (("a", 0.25), ("b", 0.5)):
        (tmp_path / run / "tables").mkdir(parents=True)
        pd.DataFrame({"model": ["rl/x"], "pass@1": [value]}).to_csv(tmp_path / run / "tables" / "summary.csv", index=False)
    table = compare_runs([tmp_path / "a", tmp_path / "b"])
    assert table.to_dict("records") == [{"run": "a", "model": "rl/x", "pass@1": 0.25},
                                        {"run": "b", "model": "rl/x", "pass@1": 0.5}]


def test_per_sample_table_orders_columns_for_chorus_eval_and_gather_scores():
    """One table builder for chorus-eval (fixed trailing columns, input order) and the
    workflow's gather_scores (every column, sorted, with the model)."""
    results = [
        {"task_id": "t2", "sample_id": 1, "passed": False, "score": 0.5, "status": "below_target",
         "sim_time_s": 0.2, "detail": "missed", "completion_sha256": "b", "cov_toggle": 0.1, "cov_line": 0.5},
        {"task_id": "t1", "sample_id": 0, "passed": True, "score": 1.0, "status": "ok",
         "sim_time_s": 0.1, "detail": "", "completion_sha256": "a", "cov_line": 1.0, "cov_branch": 1.0},
    ]
    verdict = ["task_id", "sample_id", "passed", "score", "status"]
    coverage = ["cov_branch", "cov_line", "cov_toggle"]
    evaluated = report.per_sample_table(results, rest=["sim_time_s", "detail"])
    assert list(evaluated.columns) == verdict + coverage + ["sim_time_s", "detail"]
    assert list(evaluated["task_id"]) == ["t2", "t1"] and math.isnan(evaluated["cov_branch"][0])
    gathered = report.per_sample_table(results, model="rl/a", sort=True)
    assert list(gathered.columns) == ["model", *verdict, *coverage, "sim_time_s", "detail", "completion_sha256"]
    assert list(gathered["task_id"]) == ["t1", "t2"] and set(gathered["model"]) == {"rl/a"}
    mixed = report.per_sample_table([dict(results[0], sample_id="x"), results[1]])
    assert list(mixed["sample_id"]) == ["x", "0"]  # one type a column (parquet)


def test_heatmap_panels_share_the_pipeline_column_order():
    per_sample = sample_table()
    per_task = report.per_task_pass1(per_sample, EXPERTS)
    # pivot_table sorts its columns alphabetically: the coverage panel must not keep that
    coverage = per_sample.pivot_table(index="task_id", columns="model", values="score")
    shuffled = coverage[["rl/b", "base/base", "rl/a"]]
    (_, passed), (_, covered) = report.heatmap_panels(per_task, shuffled)
    assert list(passed.columns) == list(covered.columns) == ["base/base", "rl/a", "rl/b", report.ORACLE]
    assert covered.loc["t2", "rl/b"] == 1.0 and covered["oracle/best_expert"].isna().all()


def test_training_curves_show_length_and_reward_spread(tmp_path):
    """The GRPO curves come from the trainer's log history: reward, its spread and the
    completion lengths per step, beside the terms."""
    history = [
        {"step": 1, "loss": 0.1},  # a training-loss entry without reward: not a GRPO step
        {"step": 1, "reward": 0.1, "reward_std": 0.05, "completions/mean_length": 100.0,
         "completions/max_length": 300.0, "completions/clipped_ratio": 0.0,
         "rewards/coverage_reward/mean": 0.1, "rewards/coverage_reward/std": 0.02},
        {"step": 2, "reward": 0.3, "reward_std": 0.0, "completions/mean_length": 512.0,
         "completions/max_length": 512.0, "completions/clipped_ratio": 1.0,
         "rewards/coverage_reward/mean": 0.3, "rewards/coverage_reward/std": 0.0},
    ]
    expert = tmp_path / "rl" / "e"
    expert.mkdir(parents=True)
    (expert / "rl_metrics.json").write_text(json.dumps({"log_history": history}))
    curves = pages.training_curves({}, {"e": str(expert)})
    assert list(curves["rl"]["reward_std"]) == [0.05, 0.0]
    assert "rewards/coverage_reward/std" not in curves["rl"]
    drawn = report.plot_training_curves(curves, tmp_path / "curves.png")
    assert drawn["GRPO reward spread within groups"] == [("e", "-")]
    assert drawn["Completion length (max dashed)"] == [("e", "-"), ("e: completions/max_length", "--")]
    assert drawn["Completions cut at the length cap"] == [("e", "-")]
    assert drawn["GRPO KL to the reference"] == []  # not logged (rl.beta 0): a note instead


def test_provenance_names_model_commit_versions_and_stage_times(tmp_path):
    from chorus.config import check_config
    import yaml

    config = check_config(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    benchmarks = tmp_path / "benchmarks"
    (benchmarks / "sft").mkdir(parents=True)
    header = "s\th:m:s\tmax_rss\n"
    (benchmarks / "sft" / "format.tsv").write_text(header + "120.0\t0:02:00\t900.5\n")
    (benchmarks / "sft" / "easy.tsv").write_text(header + "60.0\t0:01:00\t1200.0\n")
    (benchmarks / "aggregate.tsv").write_text(header + "6.0\t0:00:06\t100.0\n")
    times = pages.stage_wall_times(benchmarks)
    assert times.loc["sft", "jobs"] == 2 and times.loc["sft", "wall time (min, summed)"] == 3.0
    assert times.loc["sft", "longest job (min)"] == 2.0 and times.loc["sft", "peak memory (MB)"] == 1200.0
    assert list(times.index) == ["sft", "aggregate"]  # longest stage first
    page = pages.provenance_html(config, benchmarks, REPO)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert commit in page and "tiny model" in page
    assert re.search(r"<td>trl</td>\s*<td>\d", page) and "Wall time per stage" in page
    assert "vocab_size: 1024" in page  # the resolved config, defaults included
    first_page = page.split(pages.FIRST_PAGE)[1].split(pages.FIRST_PAGE_END)[0]
    assert "<!DOCTYPE" not in first_page and "<body" not in first_page and "Package versions" in first_page


def sample_page(tmp_path):
    from chorus.tasks import load_task

    per_sample = sample_table().assign(detail=lambda f: ["missed line 12"] * len(f))
    # every model writes the same completion for t1 sample 0
    completions = {(m, t, str(s)): ("same </script> answer" if (t, s) == ("t1", 0) else f"{m} {t} {s}")
                   for m, t, s in zip(per_sample["model"], per_sample["task_id"], per_sample["sample_id"])}
    rows = pages.sample_rows(per_sample, completions)
    task = load_task(FIXTURE_TASK)
    sources = pages.task_sources([task])
    sources["t1"] = sources.pop(task.id)
    path = tmp_path / "samples.html"
    path.write_text(pages.samples_page(rows, sources))
    return rows, path


def test_sample_rows_count_models_writing_the_same_completion(tmp_path):
    rows, _ = sample_page(tmp_path)
    same = rows.set_index(["model", "task_id", "sample_id"])["models with this completion"]
    assert same[("rl/a", "t1", 0)] == 3 and same[("rl/a", "t2", 1)] == 1
    assert pages.shared_completions(rows) == "1 of 2 tasks have a completion that all 3 models wrote, word for word: t1."
    assert {"status", "detail", "cov_line", "cov_branch", "completion"} <= set(rows.columns)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium (apt-get install chromium)")
def test_samples_page_filters_in_a_real_browser(tmp_path):
    """The page's script runs in headless Chromium: the model and task in the address
    select the rows, the task's prompt and RTL are shown, a completion holding
    '</script>' does not break the page."""
    _, path = sample_page(tmp_path)

    def rendered(fragment=""):
        proc = subprocess.run(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"file://{path}{fragment}"],
            capture_output=True, text=True, timeout=120,
        )
        return proc.stdout

    everything = rendered()
    assert "12 of 12 samples" in everything
    one = rendered("#model=rl/a&task=t1")
    assert "2 of 12 samples" in one and "Prompt" in one and "RTL: " in one
    assert "same &lt;/script&gt; answer" in one and "missed line 12" in one


def test_completions_share_a_budget_in_large_runs(monkeypatch):
    per_sample = sample_table()
    completions = {(m, t, str(s)): "x" * 5000
                   for m, t, s in zip(per_sample["model"], per_sample["task_id"], per_sample["sample_id"])}
    assert pages.sample_rows(per_sample, completions)["completion"].str.len().max() == 5000
    monkeypatch.setattr(pages, "COMPLETIONS_BUDGET", 12 * 1000)  # 12 samples: 1000 characters each
    cut = pages.sample_rows(per_sample, completions)["completion"]
    assert (cut.str.len() == 1000 + len("\n[... cut]")).all() and cut.str.endswith("[... cut]").all()
