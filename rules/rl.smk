# Dense-reward RL: one GRPO run per expert, from the SFT stage the expert names. The
# reward is the coverage fraction reached in Verilator simulation (or binary pass).


# config prebuild: every design built once, beside SFT (high priority: its cores are free
# while SFT holds the GPU), before the first expert; the build cache is shared by all
rule prebuild:
    input:
        manifest=rules.prepare_tasks.output.manifest,
    output:
        report=f"{RESULTS}/prebuild/designs.json",
    log:
        f"{RESULTS}/logs/prebuild.log",
    benchmark:
        f"{RESULTS}/benchmarks/prebuild.tsv"
    priority: 50
    conda:
        "../envs/simulation.yaml"
    threads: PLAN.threads("sim_job")
    resources:
        **PLAN.resources("sim_job"),
    params:
        simulation=PLAN.simulation(),
    script:
        "../scripts/prebuild.py"


rule rl:
    input:
        model=expert_input_model,
        manifest=rules.prepare_tasks.output.manifest,
        # ancient: the preflight must pass first, but re-running it re-trains nothing
        preflight=ancient(rules.preflight.output.report),
        # ancient: waits for the builds (config prebuild), re-running them re-trains nothing
        prebuilt=ancient(prebuilt_designs()),
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
