# Evaluation: sample k completions per task from a model, score them with the coverage
# harness in shards (each shard a separate CPU job: on SLURM, one sbatch job per shard),
# then gather the per-sample results. Pool "eval" samples the held-out splits; pool
# "harvest" samples train tasks for distillation (rules/consolidate.smk). With eval.rounds
# > 1 the eval pool runs coverage-closure rounds (docs/rounds.md): round r >= 2 samples
# again the samples no earlier round passed, with the harness's feedback in their
# conversation (generate_round), scores them in shards like round 1 (score_round_shard),
# and gather_scores merges the rounds.
from chorus.rounds import round_dir

EVAL_ROUNDS = config["eval"]["rounds"]


wildcard_constraints:
    round=r"[2-9]|[1-9]\d+",


def pool_rounds(pool):
    """The rounds a pool runs: eval.rounds for the eval pool, one for harvest."""
    return EVAL_ROUNDS if pool == "eval" else 1


def round_inputs(wildcards, rounds):
    """Generations and score shards of rounds 1..`rounds` of one model in one pool."""
    pool_dir = PLAN.pool_dir(wildcards.pool, wildcards.kind, wildcards.name)
    folders = [round_dir(pool_dir, r) for r in range(1, rounds + 1)]
    return {
        "generations": [f"{folder}/generations.jsonl" for folder in folders],
        "shards": [
            f"{folder}/scores/shard{shard}.jsonl"
            for folder in folders
            for shard in PLAN.shards()
        ],
    }


def feedback_params():
    """Score rows carry the feedback of the next round only when there is one (so a
    one-round evaluation keeps its params and is not re-scored)."""
    return {"feedback": True} if EVAL_ROUNDS > 1 else {}


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
        **feedback_params(),
    script:
        "../scripts/score_shard.py"


rule generate_round:
    input:
        unpack(lambda wc: round_inputs(wc, int(wc.round) - 1)),
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
        "../scripts/generate.py"


use rule score_shard as score_round_shard with:
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


rule gather_scores:
    input:
        unpack(lambda wc: round_inputs(wc, pool_rounds(wc.pool))),
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
