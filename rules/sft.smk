# Staged SFT: each stage fine-tunes the previous stage's checkpoint (the first: the base
# model) on its own data mix. Every stage's checkpoint is an output and an expert seed.


rule sft_data:
    input:
        manifest=rules.prepare_tasks.output.manifest,
        # SFT learns the tasks' reference stimuli: only once the preflight has scored
        # them as passing here (ancient: re-running it rebuilds no data)
        preflight=ancient(rules.preflight.output.report),
    output:
        data=f"{RESULTS}/data/sft/{{stage}}.jsonl",
    log:
        f"{RESULTS}/logs/sft_data/{{stage}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sft_data/{{stage}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        mix=lambda wc: PLAN.stage(wc.stage)["mix"],
    script:
        "../scripts/sft_data.py"


rule sft:
    input:
        model=sft_input_model,
        data=rules.sft_data.output.data,
    output:
        model=directory(PLAN.model_dir("sft", "{stage}")),
    log:
        f"{RESULTS}/logs/sft/{{stage}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sft/{{stage}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("gpu_job")
    resources:
        **PLAN.resources("gpu_job"),
    params:
        stage=lambda wc: PLAN.stage(wc.stage),
        settings=PLAN.sft_settings(),
        launch=PLAN.launch(),
    script:
        "../scripts/sft.py"
