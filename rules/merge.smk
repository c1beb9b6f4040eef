# Training-free consolidation: merge experts with mergekit (linear, task_arithmetic, ties,
# dare_ties, slerp). The merge's settings are params, so editing one strategy re-runs
# only that merge and what depends on it.


rule merge:
    input:
        experts=lambda wc: [
            PLAN.model_dir("rl", e) for e in PLAN.merge_experts(wc.merge)
        ],
        base=lambda wc: PLAN.model_dir("sft", PLAN.merge_base_stage(wc.merge)),
    output:
        model=directory(f"{RESULTS}/models/merge/{{merge}}"),
    log:
        f"{RESULTS}/logs/merge/{{merge}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/merge/{{merge}}.tsv"
    conda:
        "../envs/merge.yaml"
    threads: job_threads("gpu_job")
    resources:
        **job_resources("gpu_job"),
    params:
        strategy=lambda wc: PLAN.merge(wc.merge),
        device=config["device"],
    script:
        "../scripts/merge.py"
