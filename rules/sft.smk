# Staged SFT: each stage fine-tunes the previous stage's checkpoint (the first: the base
# model) on its own data mix. Every stage's checkpoint is an output and an expert seed.


rule sft:
    input:
        model=sft_input_model,
        data=rules.sft_data.output.data,
    output:
        model=directory(f"{RESULTS}/models/sft/{{stage}}"),
    log:
        f"{RESULTS}/logs/sft/{{stage}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sft/{{stage}}.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: job_threads("gpu_job")
    resources:
        **job_resources("gpu_job"),
    params:
        stage=lambda wc: PLAN.stage(wc.stage),
        settings=sft_settings(),
        launch=training_launch(),
    script:
        "../scripts/sft.py"
