# Evaluation: sample k completions per task from a model, score them with the coverage
# harness in shards (each shard a separate CPU job: on SLURM, one sbatch job per shard),
# then gather the per-sample results. Pool "eval" samples the held-out splits; pool
# "harvest" samples train tasks for distillation (rules/consolidate.smk).


rule generate:
    input:
        model=model_dir,
        manifest=rules.prepare_tasks.output.manifest,
    output:
        generations=f"{POOL_DIR}/generations.jsonl",
    log:
        f"{RESULTS}/logs/generate/{{pool}}/{{kind}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate/{{pool}}/{{kind}}/{{name}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("gpu_job")
    resources:
        **PLAN.resources("gpu_job"),
    params:
        pool=lambda wc: PLAN.pool(wc.pool),
        sampling=PLAN.sampling(),
        seed=lambda wc: PLAN.eval_seed(wc.kind, wc.name),
        device=config["device"],
    script:
        "../scripts/generate.py"


rule score_shard:
    input:
        generations=rules.generate.output.generations,
        manifest=rules.prepare_tasks.output.manifest,
        # ancient: the preflight must pass first, but re-running it re-trains nothing
        preflight=ancient(rules.preflight.output.report),
    output:
        scores=f"{POOL_DIR}/scores/shard{{shard}}.jsonl",
    log:
        f"{RESULTS}/logs/score/{{pool}}/{{kind}}/{{name}}/shard{{shard}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score/{{pool}}/{{kind}}/{{name}}/shard{{shard}}.tsv"
    conda:
        "../envs/simulation.yaml"
    threads: PLAN.threads("sim_job")
    resources:
        **PLAN.resources("sim_job"),
    params:
        shard=lambda wc: int(wc.shard),
        num_shards=config["simulation"]["shards"],
        simulation=PLAN.simulation(),
    script:
        "../scripts/score_shard.py"


rule gather_scores:
    input:
        shards=score_shards,
        generations=rules.generate.output.generations,
    output:
        table=f"{POOL_DIR}/per_sample.csv",
    log:
        f"{RESULTS}/logs/gather/{{pool}}/{{kind}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/gather/{{pool}}/{{kind}}/{{name}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        model=lambda wc: f"{wc.kind}/{wc.name}",
    script:
        "../scripts/gather_scores.py"
