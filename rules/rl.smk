# Dense-reward RL: one GRPO run per expert, from the SFT stage the expert names. The
# reward is the coverage fraction reached in Verilator simulation (or binary pass).


rule rl:
    input:
        model=lambda wc: PLAN.model_dir("sft", PLAN.expert(wc.expert)["from_stage"]),
        manifest=rules.prepare_tasks.output.manifest,
        # ancient: the preflight must pass first, but re-running it re-trains nothing
        preflight=ancient(rules.preflight.output.report),
    output:
        model=directory(f"{RESULTS}/models/rl/{{expert}}"),
    log:
        f"{RESULTS}/logs/rl/{{expert}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/rl/{{expert}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: job_threads("rl_job")
    resources:
        **job_resources("rl_job"),
    params:
        expert=lambda wc: PLAN.expert(wc.expert),
        simulation=sandbox_limits(),
        launch=training_launch(),
    script:
        "../scripts/rl.py"
