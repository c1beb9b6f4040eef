# Dense-reward RL: one GRPO run per expert, from the SFT stage the expert names. The
# reward is the coverage fraction reached in Verilator simulation (or binary pass).


rule rl:
    input:
        model=expert_input_model,
        manifest=rules.prepare_tasks.output.manifest,
        # ancient: the preflight must pass first, but re-running it re-trains nothing
        preflight=ancient(rules.preflight.output.report),
    output:
        model=directory(PLAN.model_dir("rl", "{expert}")),
    log:
        f"{RESULTS}/logs/rl/{{expert}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/rl/{{expert}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("rl_job")
    resources:
        **PLAN.resources("rl_job"),
    params:
        expert=lambda wc: PLAN.expert(wc.expert),
        simulation=PLAN.simulation(),
        launch=PLAN.launch(),
    script:
        "../scripts/rl.py"
