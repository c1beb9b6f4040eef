"""Score one shard of a model's generations in the sandboxed Verilator+cocotb harness.

Results are appended per sample to a sidecar file, so a killed or preempted job resumes
without re-simulating finished samples; the declared output appears only when complete.
A coverage-closure round's shard (rule score_round_shard, `params.feedback`) also gives
each result row the harness's feedback for the next round (chorus.harness.feedback).
"""

from chorus.harness import score_generations
from chorus.harness.feedback import feedback_field
from chorus.harness.timeouts import sandbox_settings
from chorus.io import read_jsonl, script_logging
from chorus.plan import job_settings
from chorus.prompts import extract_answer
from chorus.tasks import load_manifest, tasks_by_id

with script_logging(snakemake):
    shard, num_shards = snakemake.params.shard, snakemake.params.num_shards
    rows = read_jsonl(snakemake.input.generations)[shard::num_shards]
    limits, timeouts = sandbox_settings(job_settings(snakemake.params, snakemake.config)["simulation"])
    results = score_generations(
        rows,
        tasks_by_id(load_manifest(snakemake.input.manifest)),
        snakemake.output.scores,
        workers=snakemake.threads,
        limits=limits,
        timeouts=timeouts,
        extract=extract_answer,
        annotate=feedback_field if getattr(snakemake.params, "feedback", False) else None,
    )
    passed = sum(r["passed"] for r in results)
    print(f"shard {shard}/{num_shards}: {len(results)} samples scored, {passed} passing")
