"""Check the harness on every task's own stimuli before any candidate is scored; on a
mismatch, end the job with one message (in the log and on the workflow's stderr)."""

import sys

from chorus.harness.preflight import PreflightError, preflight_tasks, run_preflight
from chorus.harness.timeouts import sandbox_settings
from chorus.io import atomic_write_json, script_logging
from chorus.plan import job_settings
from chorus.tasks import load_manifest

with script_logging(snakemake):
    limits, timeouts = sandbox_settings(job_settings(snakemake.params, snakemake.config)["simulation"])
    try:
        summary = run_preflight(
            preflight_tasks(load_manifest(snakemake.input.manifest)),
            limits=limits,
            timeouts=timeouts,
            workers=snakemake.threads,
        )
    except PreflightError as err:
        print(err)
        failure = str(err)
    else:
        failure = None
        print(f"preflight passed: {summary['checks']} stimuli of {summary['tasks']} tasks scored as expected")
        atomic_write_json(snakemake.output.report, summary)
if failure:
    print(failure, file=sys.stderr)
    sys.exit(1)
