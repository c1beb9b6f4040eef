# Aggregate and report: per-task Pass@1 (tasks x models), summary (models x Pass@k and
# mean coverage) with the oracle best-expert-per-task row, and plots for the HTML report.


rule aggregate:
    input:
        tables=expand(
            f"{RESULTS}/eval/eval/{{model}}/per_sample.csv",
            model=[m.id for m in PLAN.models()],
        ),
        manifest=rules.prepare_tasks.output.manifest,
    output:
        per_task=report(
            f"{RESULTS}/tables/per_task_pass1.csv",
            caption="../report/per_task_pass1.rst",
            category="Tables",
        ),
        summary=report(
            f"{RESULTS}/tables/summary.csv",
            caption="../report/summary.rst",
            category="Tables",
        ),
        per_sample=f"{RESULTS}/tables/per_sample.csv",
    log:
        f"{RESULTS}/logs/aggregate.log",
    benchmark:
        f"{RESULTS}/benchmarks/aggregate.tsv"
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        **job_resources("light_job"),
    params:
        pass_at=config["eval"].get("pass_at", [1]),
        bootstrap=config["eval"]["bootstrap"],
        experts=[f"rl/{e}" for e in PLAN.experts],
    script:
        "../scripts/aggregate.py"


rule plots:
    input:
        per_task=rules.aggregate.output.per_task,
        per_sample=rules.aggregate.output.per_sample,
    output:
        heatmap=report(
            f"{RESULTS}/plots/per_task_heatmap.png",
            caption="../report/heatmap.rst",
            category="Plots",
        ),
        complementarity=report(
            f"{RESULTS}/plots/expert_complementarity.png",
            caption="../report/complementarity.rst",
            category="Plots",
        ),
    log:
        f"{RESULTS}/logs/plots.log",
    benchmark:
        f"{RESULTS}/benchmarks/plots.tsv"
    conda:
        "../envs/report.yaml"
    threads: 1
    resources:
        **job_resources("light_job"),
    params:
        experts=[f"rl/{e}" for e in PLAN.experts],
    script:
        "../scripts/plots.py"
