# Post-training consolidation, the trained alternative to merging: sample every expert on
# the train tasks, keep the samples the simulator verified as passing, and fine-tune one
# model on their union (distillation), optionally followed by RL.


# The settings that decide the harvest samples, as a file: consolidate_data depends on it
# instead of on the harvest tables' modification times (see there).
rule harvest_settings:
    output:
        settings=f"{RESULTS}/data/consolidate/harvest_settings.json",
    log:
        f"{RESULTS}/logs/harvest_settings.log",
    benchmark:
        f"{RESULTS}/benchmarks/harvest_settings.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        settings=PLAN.harvest_settings(),
    script:
        "../scripts/record_settings.py"


# The harvest tables are ancient(): re-scoring them in another number of shards rewrites
# them unchanged and must not retrain the distilled model. What does change them re-runs
# this rule through its other inputs: the experts and the harvest settings. (A params
# change would not: Snakemake skips the params of jobs downstream of a re-run job.)
rule consolidate_data:
    input:
        tables=ancient(PLAN.pool_files("harvest", PLAN.harvested(), "per_sample.csv")),
        generations=ancient(
            PLAN.pool_files("harvest", PLAN.harvested(), "generations.jsonl")
        ),
        experts=[PLAN.model_dir(m.kind, m.name) for m in PLAN.harvested()],
        harvest_settings=rules.harvest_settings.output.settings,
        manifest=rules.prepare_tasks.output.manifest,
    output:
        data=f"{RESULTS}/data/consolidate/{PLAN.distilled}.jsonl",
        stats=f"{RESULTS}/data/consolidate/{PLAN.distilled}.stats.json",
    log:
        f"{RESULTS}/logs/consolidate_data.log",
    benchmark:
        f"{RESULTS}/benchmarks/consolidate_data.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        include_reference=config["consolidate"]["include_reference"],
    script:
        "../scripts/consolidate_data.py"


rule consolidate_sft:
    input:
        model=PLAN.model_dir("sft", PLAN.consolidate_base_stage),
        data=rules.consolidate_data.output.data,
    output:
        model=directory(PLAN.model_dir("consolidated", PLAN.distilled)),
    log:
        f"{RESULTS}/logs/consolidate_sft.log",
    benchmark:
        f"{RESULTS}/benchmarks/consolidate_sft.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("gpu_job")
    resources:
        **PLAN.resources("gpu_job"),
    params:
        stage=PLAN.distill_stage(),
        settings=PLAN.sft_settings(),
        launch=PLAN.launch(),
    script:
        "../scripts/sft.py"


rule consolidate_rl:
    input:
        model=rules.consolidate_sft.output.model,
        manifest=rules.prepare_tasks.output.manifest,
        # ancient: the preflight must pass first, but re-running it re-trains nothing
        preflight=ancient(rules.preflight.output.report),
    output:
        model=directory(PLAN.model_dir("consolidated", f"{PLAN.distilled}_rl")),
    log:
        f"{RESULTS}/logs/consolidate_rl.log",
    benchmark:
        f"{RESULTS}/benchmarks/consolidate_rl.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("rl_job")
    resources:
        **PLAN.resources("rl_job"),
    params:
        expert=PLAN.distill_rl_expert(),
        simulation=PLAN.simulation(),
        launch=PLAN.launch(),
    script:
        "../scripts/rl.py"
