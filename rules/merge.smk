# Training-free consolidation: merge experts with mergekit (linear, task_arithmetic, ties,
# dare_ties, slerp). The merge's settings are params, so editing one strategy re-runs
# only that merge and what depends on it.


rule merge:
    input:
        experts=merged_experts,
        base=merge_base_model,
    output:
        model=directory(PLAN.model_dir("merge", "{merge}")),
    log:
        f"{RESULTS}/logs/merge/{{merge}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge/{{merge}}.tsv"
    conda:
        "../envs/merge.yaml"
    threads: PLAN.threads("gpu_job")
    resources:
        **PLAN.resources("gpu_job"),
    params:
        strategy=lambda wc: PLAN.merge(wc.merge),
        device=config["device"],
    script:
        "../scripts/merge.py"
