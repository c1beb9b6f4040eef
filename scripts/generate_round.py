"""A later coverage-closure round of one model (eval.rounds, docs/rounds.md): one
completion per sample that no earlier round passed, its conversation continued with its
answers and the harness's feedback on each. Round 1 is scripts/generate.py."""

from chorus.generate import sample_completions
from chorus.io import script_logging
from chorus.plan import job_settings
from chorus.rounds import attempts, next_conversations, read_rounds, round_seed
from chorus.settings import Sampling
from chorus.tasks import load_manifest, tasks_by_id
from chorus.training import resolve_device

with script_logging(snakemake):
    settings = job_settings(snakemake.params, snakemake.config)
    pool = settings["pool"]
    tasks = load_manifest(snakemake.input.manifest, splits=pool["splits"])
    earlier = read_rounds(list(snakemake.input.generations), list(snakemake.input.shards))
    sample_completions(
        snakemake.input.model,
        tasks,
        pool["k"],
        snakemake.output.generations,
        Sampling.from_job(settings["sampling"]),
        seed=round_seed(snakemake.params.seed, settings["round"]),
        device=resolve_device(snakemake.params.device),
        conversations=next_conversations(tasks_by_id(tasks), attempts(earlier)),
    )
