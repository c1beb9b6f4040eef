# chorus-flow: the CHORUS recipe as a workflow.
#   staged SFT -> dense-reward RL experts -> merging / post-training -> per-task Pass@1
# Each stage lives in its own rules/*.smk; this file is the table of contents.


from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "config/config.schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/synth.smk"
include: "rules/data.smk"
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
        rules.plots.output,
