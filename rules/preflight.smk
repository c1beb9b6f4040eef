# Preflight: before any scoring or RL job, score every task's reference stimulus (must
# pass) and trivial stimulus (must fail) with the scoring jobs' sandbox settings and
# resources. A harness that scores wrongly here (a foreign Python, a broken toolchain,
# a broken task) would score every candidate wrongly: the run stops with one message.


rule preflight:
    input:
        manifest=rules.prepare_tasks.output.manifest,
    output:
        report=f"{RESULTS}/preflight/selfcheck.json",
    log:
        f"{RESULTS}/logs/preflight.log",
    benchmark:
        f"{RESULTS}/benchmarks/preflight.tsv"
    # ready right after prepare_tasks: scheduled before the training jobs
    priority: 100
    conda:
        "../envs/simulation.yaml"
    threads: PLAN.threads("sim_job")
    resources:
        **PLAN.resources("sim_job"),
    params:
        simulation=PLAN.simulation(),
    script:
        "../scripts/preflight.py"
