# chorus-flow: the CHORUS recipe as a workflow.
#   staged SFT -> dense-reward RL experts -> merging / post-training -> per-task Pass@1
# Each stage lives in its own rules/*.smk; this file is the table of contents.


from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


# checks config against config/config.schema.yaml and fills in its defaults
include: "rules/common.smk"


report: "report/workflow.rst"


# small bookkeeping jobs run on the submitting host, not as cluster jobs
localrules:
    all,
    synth_corpus,
    prepare_tasks,
    sft_data,
    gather_scores,
    harvest_settings,
    consolidate_data,
    aggregate,
    report_tables,
    plots,


include: "rules/synth.smk"
include: "rules/data.smk"
include: "rules/preflight.smk"
include: "rules/sft.smk"
include: "rules/rl.smk"
include: "rules/merge.smk"
include: "rules/consolidate.smk"
include: "rules/eval.smk"
include: "rules/report.smk"


rule all:
    default_target: True
    input:
        rules.aggregate.output,
        rules.report_tables.output,
        rules.plots.output,
        round_plots(),
