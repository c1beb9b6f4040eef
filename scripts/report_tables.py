"""The report's HTML pages: overview (status banner, summary, statuses, coverage per
metric), per-sample view, Pass@1 per difficulty / family / task, expert complementarity,
seeds, and the provenance of the first page."""

from pathlib import Path

import pandas as pd

from chorus import report_pages as pages
from chorus.io import atomic_write_json, atomic_write_text, read_jsonl, script_logging
from chorus.tasks import load_manifest

with script_logging(snakemake):
    per_sample = pd.read_csv(snakemake.input.per_sample)
    summary = pd.read_csv(snakemake.input.summary)
    experts = snakemake.params.experts
    k = snakemake.params.k
    status = pages.run_status(per_sample)
    atomic_write_json(snakemake.output.status, status)
    atomic_write_text(snakemake.output.banner, pages.banner_html(status))

    overview = [
        pages.banner_html(status, pointer=False),
        pages.table_html(
            summary.set_index("model"),
            "Summary: Pass@k and mean coverage score per model",
            f"Pass@k by the unbiased estimator over k={k} samples per task, averaged over "
            "tasks (an interval, where shown, is that of the mean over tasks). mean_coverage: "
            "per-task mean of the dense score min(achieved/target, 1) averaged over the "
            "targeted metrics. oracle/best_expert: per task the best RL expert.",
        ),
        pages.table_html(
            pd.read_csv(snakemake.input.comparisons),
            "The study's questions: paired comparisons of Pass@1",
            "stage: does each stage beat the model it starts from; reward: the dense expert "
            "against the binary one of the same stage; complementarity: the oracle row against "
            "the best expert; consolidation: each merged or distilled model against the best "
            "expert. difference: mean over the tasks both have; its interval resamples tasks "
            "for both models at once (paired bootstrap); verdict: higher or lower where that "
            "interval leaves out 0.",
            index=False,
        ),
        pages.table_html(
            pages.status_breakdown(per_sample),
            "Samples per status and model",
            "ok: reached every coverage target; below_target: simulated but missed a target; "
            "the others: the stimulus did not compile, crashed, timed out or hit a limit.",
        ),
        pages.table_html(
            pages.coverage_by_metric(per_sample),
            "Mean coverage per metric and model",
            "Mean achieved coverage fraction over all samples (failed samples count as 0).",
        ),
    ]
    atomic_write_text(snakemake.output.overview, pages.html_page("Overview", overview))

    tasks = load_manifest(snakemake.input.manifest)
    completions = {
        (model, str(g["task_id"]), str(g["sample_id"])): g["completion"]
        for model, path in zip(snakemake.params.models, snakemake.input.generations, strict=True)
        for g in read_jsonl(path)
    }
    atomic_write_text(snakemake.output.samples, pages.samples_page(
        pages.sample_rows(per_sample, completions), pages.task_sources(tasks)))
    atomic_write_text(snakemake.output.provenance, pages.provenance_html(
        snakemake.config, snakemake.params.benchmarks, Path(snakemake.scriptdir).parent))

    attributes = pages.task_attributes(tasks)
    breakdown = []
    for column, what in (("difficulty", "difficulty"), ("family", "task family")):
        table = pages.pass1_by(per_sample, attributes, column)
        if table is not None:
            breakdown.append(pages.table_html(table, f"Pass@1 per {what} and model",
                                              "Mean over the tasks of that group of the per-task Pass@1."))
    per_task = per_sample.assign(passed=per_sample["passed"].astype(float)).pivot_table(
        index="task_id", columns="model", values="passed", aggfunc="mean"
    ).reindex(columns=list(dict.fromkeys(per_sample["model"])))
    per_task.columns.name = None
    breakdown.append(pages.table_html(per_task, "Pass@1 per task and model",
                                      f"Fraction of the k={k} samples of the task that passed. "
                                      "Tables / Samples has this table with a link on every cell "
                                      "to its samples, and each task's prompt and RTL."))
    atomic_write_text(snakemake.output.breakdown, pages.html_page("Pass@1 by task group", breakdown))

    complementarity = [
        pages.table_html(
            pages.oracle_gap(summary, experts),
            "Oracle gap per expert",
            "gap: Pass@1 that a perfect per-task choice among the experts adds over the expert "
            "alone; what merging or distillation can at most recover.",
        ),
        pages.table_html(
            pages.pairwise_disagreement(per_sample, experts),
            "Pairwise disagreement of the experts",
            "Fraction of tasks that exactly one of the two experts solves (at least one "
            "passing sample). 0: the same tasks; high: complementary experts.",
        ),
        pages.table_html(
            pages.task_winners(per_sample, experts),
            "Per-task Pass@1 of each expert and the winner",
            "winner: the expert(s) with the best Pass@1 on the task; '-': none passes.",
        ),
    ]
    atomic_write_text(snakemake.output.complementarity,
                      pages.html_page("Expert complementarity", complementarity))

    seeds = pd.read_csv(snakemake.input.seeds)
    atomic_write_text(snakemake.output.seeds, pages.html_page("Seeds", [pages.table_html(
        seeds.set_index("model"),
        "Mean and 95% interval over seed replicates",
        "Models repeated for every value of the config's seeds list (RL experts) show the mean "
        "and Student-t 95% interval of each metric over the seeds; others have one seed.",
    )]))
    print(status)
