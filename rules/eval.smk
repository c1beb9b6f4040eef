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


# Coverage-closure rounds (eval.rounds > 1, docs/rounds.md): round r >= 2 samples again,
# one completion each, the samples no earlier round passed, their conversation continued
# with the harness's feedback (generate_round), and scores them in shards like round 1
# (score_round_shard); gather_rounds merges the rounds into the per-sample table. The
# rules above stay as they are for a one-round evaluation and the harvest pool.
rule generate_round:
    input:
        unpack(earlier_round_inputs),
        model=model_dir,
        manifest=rules.prepare_tasks.output.manifest,
    output:
        generations=f"{POOL_DIR}/round{{round}}/generations.jsonl",
    log:
        f"{RESULTS}/logs/generate/{{pool}}/{{kind}}/{{name}}/round{{round}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate/{{pool}}/{{kind}}/{{name}}/round{{round}}.tsv"
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
        round=lambda wc: int(wc.round),
    script:
        "../scripts/generate_round.py"


rule score_round_shard:
    input:
        generations=rules.generate_round.output.generations,
        manifest=rules.prepare_tasks.output.manifest,
        preflight=ancient(rules.preflight.output.report),
    output:
        scores=f"{POOL_DIR}/round{{round}}/scores/shard{{shard}}.jsonl",
    log:
        f"{RESULTS}/logs/score/{{pool}}/{{kind}}/{{name}}/round{{round}}/shard{{shard}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/score/{{pool}}/{{kind}}/{{name}}/round{{round}}/shard{{shard}}.tsv"
    conda:
        "../envs/simulation.yaml"
    threads: PLAN.threads("sim_job")
    resources:
        **PLAN.resources("sim_job"),
    params:
        shard=lambda wc: int(wc.shard),
        num_shards=config["simulation"]["shards"],
        simulation=PLAN.simulation(),
        feedback=True,
    script:
        "../scripts/score_shard.py"


if config["eval"]["rounds"] > 1:

    # round 1 of the eval pool, its score rows with the feedback for round 2
    use rule score_round_shard as score_first_round_shard with:
        input:
            generations=f"{PLAN.pool_dir('eval')}/generations.jsonl",
            manifest=rules.prepare_tasks.output.manifest,
            preflight=ancient(rules.preflight.output.report),
        output:
            scores=f"{PLAN.pool_dir('eval')}/scores/shard{{shard}}.jsonl",
        log:
            f"{RESULTS}/logs/score_first_round/{{kind}}/{{name}}/shard{{shard}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/score_first_round/{{kind}}/{{name}}/shard{{shard}}.tsv"

    rule gather_rounds:
        input:
            unpack(eval_round_inputs),
        output:
            table=f"{PLAN.pool_dir('eval')}/per_sample.csv",
        log:
            f"{RESULTS}/logs/gather_rounds/{{kind}}/{{name}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/gather_rounds/{{kind}}/{{name}}.tsv"
        conda:
            "../envs/chorus.yaml"
        threads: PLAN.threads("light_job")
        resources:
            **PLAN.resources("light_job"),
        params:
            model=lambda wc: f"{wc.kind}/{wc.name}",
            rounds=config["eval"]["rounds"],
        script:
            "../scripts/gather_rounds.py"

    ruleorder: score_first_round_shard > score_shard
    ruleorder: gather_rounds > gather_scores
