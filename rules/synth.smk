# Synthetic corpus (docs/synth.md): designs are generated and verified in simulation in
# `synth.shards` independent jobs (on SLURM, one sbatch job each, running in parallel),
# then gathered into one corpus listing; prepare_tasks adds the corpus to the task set.

SYNTH = config["synth"]  # the Plan checked its family names at start-up


rule synth_shard:
    output:
        tasks=directory(f"{RESULTS}/synth/shards/shard{{shard}}"),
        stats=f"{RESULTS}/synth/shards/shard{{shard}}.json",
    log:
        f"{RESULTS}/logs/synth/shard{{shard}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/synth/shard{{shard}}.tsv"
    conda:
        "../envs/simulation.yaml"
    threads: PLAN.threads("sim_job")
    resources:
        **PLAN.resources("sim_job"),
    params:
        synth=SYNTH,
        shard=lambda wc: int(wc.shard),
    script:
        "../scripts/synth_shard.py"


rule synth_corpus:
    input:
        stats=expand(rules.synth_shard.output.stats, shard=PLAN.synth_shards()),
        tasks=expand(rules.synth_shard.output.tasks, shard=PLAN.synth_shards()),
    output:
        corpus=f"{RESULTS}/synth/corpus.json",
    log:
        f"{RESULTS}/logs/synth/corpus.log",
    benchmark:
        f"{RESULTS}/benchmarks/synth/corpus.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    script:
        "../scripts/synth_corpus.py"
