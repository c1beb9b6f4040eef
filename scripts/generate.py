"""Sample k completions per task of the pool's splits from one model; in a later
coverage-closure round (the `round` param, eval.rounds), one completion per sample that
no earlier round passed, continuing its conversation with the harness's feedback."""

from chorus.generate import sample_completions
from chorus.io import script_logging
from chorus.plan import job_settings
from chorus.rounds import attempts, next_conversations, read_rounds, round_seed
from chorus.tasks import load_manifest, tasks_by_id
from chorus.training import resolve_device

with script_logging(snakemake):
    settings = job_settings(snakemake.params, snakemake.config)
    pool, sampling = settings["pool"], settings["sampling"]
    tasks = load_manifest(snakemake.input.manifest, splits=pool["splits"])
    round_number = settings.get("round", 1)
    conversations = None
    if round_number > 1:
        earlier = read_rounds(list(snakemake.input.generations), list(snakemake.input.shards))
        conversations = next_conversations(tasks_by_id(tasks), attempts(earlier))
    sample_completions(
        snakemake.input.model,
        tasks,
        pool["k"],
        snakemake.output.generations,
        temperature=sampling["temperature"],
        top_p=sampling["top_p"],
        max_new_tokens=sampling["max_new_tokens"],
        seed=round_seed(snakemake.params.seed, round_number),
        device=resolve_device(snakemake.params.device),
        sampler=sampling["sampler"],
        batch_size=sampling["batch_size"],
        conversations=conversations,
    )
