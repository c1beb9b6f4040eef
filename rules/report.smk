# Aggregate and report: per-task Pass@1 (tasks x models), summary (models x Pass@k and
# mean coverage) with the oracle best-expert-per-task row, the mean and interval over
# seed replicates, HTML tables and plots for `snakemake --report`.


rule aggregate:
    input:
        tables=PLAN.pool_files("eval", PLAN.models(), "per_sample.csv"),
        manifest=rules.prepare_tasks.output.manifest,
    output:
        per_task=f"{RESULTS}/tables/per_task_pass1.csv",
        summary=f"{RESULTS}/tables/summary.csv",
        comparisons=f"{RESULTS}/tables/comparisons.csv",
        seeds=f"{RESULTS}/tables/seeds.csv",
        per_sample=f"{RESULTS}/tables/per_sample.csv",
    log:
        f"{RESULTS}/logs/aggregate.log",
    benchmark:
        f"{RESULTS}/benchmarks/aggregate.tsv"
    conda:
        "../envs/report.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        pass_at=config["eval"]["pass_at"],
        bootstrap=config["eval"]["bootstrap"],
        experts=PLAN.expert_ids,
        comparisons=PLAN.comparisons(),
    script:
        "../scripts/aggregate.py"


# Report items: the category and subcategory group them in the report's menu, the
# numbered label orders them (the report sorts by label) and names them instead of a path.
rule report_tables:
    input:
        per_sample=rules.aggregate.output.per_sample,
        summary=rules.aggregate.output.summary,
        comparisons=rules.aggregate.output.comparisons,
        seeds=rules.aggregate.output.seeds,
        manifest=rules.prepare_tasks.output.manifest,
        generations=PLAN.pool_files("eval", PLAN.models(), "generations.jsonl"),
    output:
        banner=report(
            f"{RESULTS}/report/banner.html",
            caption="../report/banner.rst",
            category="Overview",
            subcategory="Run",
            labels={"page": "1 Run status"},
        ),
        provenance=report(
            f"{RESULTS}/report/provenance.html",
            caption="../report/provenance.rst",
            category="Overview",
            subcategory="Run",
            labels={"page": "2 Provenance: model, commit, versions, times, config"},
        ),
        overview=report(
            f"{RESULTS}/report/overview.html",
            caption="../report/overview.rst",
            category="Tables",
            subcategory="Evaluation",
            labels={"table": "1 Overview: Pass@k, statuses, coverage per metric"},
        ),
        samples=report(
            f"{RESULTS}/report/samples.html",
            caption="../report/samples.rst",
            category="Tables",
            subcategory="Evaluation",
            labels={"table": "2 Samples: completion, status, error, coverage"},
        ),
        breakdown=report(
            f"{RESULTS}/report/breakdown.html",
            caption="../report/breakdown.rst",
            category="Tables",
            subcategory="Evaluation",
            labels={"table": "3 Pass@1 per difficulty, family and task"},
        ),
        complementarity=report(
            f"{RESULTS}/report/complementarity.html",
            caption="../report/complementarity_tables.rst",
            category="Tables",
            subcategory="Evaluation",
            labels={"table": "4 Expert complementarity"},
        ),
        seeds=report(
            f"{RESULTS}/report/seeds.html",
            caption="../report/seeds.rst",
            category="Tables",
            subcategory="Evaluation",
            labels={"table": "5 Mean over seeds"},
        ),
        status=f"{RESULTS}/report/status.json",
    log:
        f"{RESULTS}/logs/report_tables.log",
    benchmark:
        f"{RESULTS}/benchmarks/report_tables.tsv"
    conda:
        "../envs/report.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        experts=PLAN.expert_ids,
        k=PLAN.pool("eval")["k"],
        models=[m.id for m in PLAN.models()],
        benchmarks=f"{RESULTS}/benchmarks",
    script:
        "../scripts/report_tables.py"


rule plots:
    input:
        per_task=rules.aggregate.output.per_task,
        per_sample=rules.aggregate.output.per_sample,
        sft=[PLAN.model_dir("sft", s) for s in PLAN.stages],
        rl=[PLAN.model_dir("rl", e) for e in PLAN.expert_replicas],
    output:
        heatmap=report(
            f"{RESULTS}/plots/per_task_heatmap.png",
            caption="../report/heatmap.rst",
            category="Plots",
            subcategory="Evaluation",
            labels={"plot": "1 Per-task Pass@1 and coverage heatmaps"},
        ),
        complementarity=report(
            f"{RESULTS}/plots/expert_complementarity.png",
            caption="../report/complementarity.rst",
            category="Plots",
            subcategory="Evaluation",
            labels={"plot": "2 Expert complementarity"},
        ),
        coverage=report(
            f"{RESULTS}/plots/coverage_distribution.png",
            caption="../report/coverage_distribution.rst",
            category="Plots",
            subcategory="Evaluation",
            labels={"plot": "3 Coverage score distribution"},
        ),
        training=report(
            f"{RESULTS}/plots/training_curves.png",
            caption="../report/training_curves.rst",
            category="Plots",
            subcategory="Training",
            labels={"plot": "4 Training curves"},
        ),
    log:
        f"{RESULTS}/logs/plots.log",
    benchmark:
        f"{RESULTS}/benchmarks/plots.tsv"
    conda:
        "../envs/report.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        experts=PLAN.expert_ids,
        stages=PLAN.stages,
        rl=PLAN.expert_replicas,
    script:
        "../scripts/plots.py"


if config["eval"]["rounds"] > 1:

    # Pass@1 and coverage after each coverage-closure round (docs/rounds.md)
    rule plot_rounds:
        input:
            per_sample=rules.aggregate.output.per_sample,
        output:
            plot=report(
                f"{RESULTS}/plots/pass1_by_round.png",
                caption="../report/rounds.rst",
                category="Plots",
                subcategory="Evaluation",
                labels={"plot": "5 Pass@1 after each round"},
            ),
        log:
            f"{RESULTS}/logs/plot_rounds.log",
        benchmark:
            f"{RESULTS}/benchmarks/plot_rounds.tsv"
        conda:
            "../envs/report.yaml"
        threads: PLAN.threads("light_job")
        resources:
            **PLAN.resources("light_job"),
        params:
            bootstrap=config["eval"]["bootstrap"],
        script:
            "../scripts/plot_rounds.py"
