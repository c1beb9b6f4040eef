# Evaluation: sample k completions per task from a model, score them with the coverage
# harness in shards (each shard a separate CPU job: on SLURM, one sbatch job per shard),
# then gather the per-sample results. Pool "eval" samples the held-out splits; pool
# "harvest" samples train tasks for distillation (rules/consolidate.smk).


def pool_settings(pool):
    if pool == "eval":
        return {"splits": config["eval"]["splits"], "k": config["eval"]["k"]}
    return {"splits": ["train"], "k": config["consolidate"]["samples_per_task"]}


rule generate:
    input:
        model=model_dir,
        manifest=rules.prepare_tasks.output.manifest,
    output:
        generations=f"{RESULTS}/eval/{{pool}}/{{kind}}/{{name}}/generations.jsonl",
    log:
        f"{RESULTS}/logs/generate/{{pool}}/{{kind}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate/{{pool}}/{{kind}}/{{name}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: job_threads("gpu_job")
    resources:
        **job_resources("gpu_job"),
    params:
        pool=lambda wc: pool_settings(wc.pool),
        sampling={
            k: v
            for k, v in config["eval"].items()
            if k not in ("splits", "k", "bootstrap")
        },
        device=config["device"],
    script:
        "../scripts/generate.py"


rule score_shard:
    input:
        generations=rules.generate.output.generations,
        manifest=rules.prepare_tasks.output.manifest,
    output:
        scores=f"{RESULTS}/eval/{{pool}}/{{kind}}/{{name}}/scores/shard{{shard}}.jsonl",
    log:
        f"{RESULTS}/logs/score/{{pool}}/{{kind}}/{{name}}/shard{{shard}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score/{{pool}}/{{kind}}/{{name}}/shard{{shard}}.tsv"
    conda:
        "../envs/simulation.yaml"
    threads: job_threads("sim_job")
    resources:
        **job_resources("sim_job"),
    params:
        shard=lambda wc: int(wc.shard),
        num_shards=config["simulation"]["shards"],
        simulation=config["simulation"],
    script:
        "../scripts/score_shard.py"


rule gather_scores:
    input:
        shards=expand(
            f"{RESULTS}/eval/{{{{pool}}}}/{{{{kind}}}}/{{{{name}}}}/scores/shard{{shard}}.jsonl",
            shard=PLAN.shards(),
        ),
        generations=rules.generate.output.generations,
    output:
        table=f"{RESULTS}/eval/{{pool}}/{{kind}}/{{name}}/per_sample.csv",
    log:
        f"{RESULTS}/logs/gather/{{pool}}/{{kind}}/{{name}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/gather/{{pool}}/{{kind}}/{{name}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: 1
    resources:
        **job_resources("light_job"),
    params:
        model=lambda wc: f"{wc.kind}/{wc.name}",
    script:
        "../scripts/gather_scores.py"
