# Synthetic corpus (docs/synth.md): designs are generated and verified in simulation in
# `synth.shards` independent jobs (on SLURM, one sbatch job each, running in parallel),
# then gathered into one corpus listing; prepare_tasks adds the corpus to the task set.

SYNTH = config["synth"]
if SYNTH["enabled"]:
    from chorus.synth.corpus import split_families

    split_families(SYNTH)  # an unknown family name stops the run at start-up


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
    threads: job_threads("sim_job")
    resources:
        **job_resources("sim_job"),
    params:
        synth=SYNTH,
        shard=lambda wc: int(wc.shard),
    script:
        "../scripts/synth_shard.py"


rule synth_corpus:
    input:
        stats=expand(
            f"{RESULTS}/synth/shards/shard{{shard}}.json",
            shard=range(SYNTH["shards"]),
        ),
        tasks=expand(
            f"{RESULTS}/synth/shards/shard{{shard}}",
            shard=range(SYNTH["shards"]),
        ),
    output:
        corpus=f"{RESULTS}/synth/corpus.json",
    log:
        f"{RESULTS}/logs/synth/corpus.log",
    benchmark:
        f"{RESULTS}/benchmarks/synth/corpus.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: 1
    resources:
        **job_resources("light_job"),
    script:
        "../scripts/synth_corpus.py"
