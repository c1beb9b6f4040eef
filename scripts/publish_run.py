"""Write run.json for `make experiment-publish`: python scripts/publish_run.py RESULTS OUT --command CMD
(chorus.run_record says what it holds)."""

import argparse
import json

from chorus.io import atomic_write_text
from chorus.run_record import run_record

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("results", help="the run's results folder (results/<run_name>)")
parser.add_argument("out", help="where run.json goes")
parser.add_argument("--command", required=True, help="the command that ran the workflow")
args = parser.parse_args()
record = run_record(args.results, args.command)
atomic_write_text(args.out, json.dumps(record, indent=2) + "\n")
print(f"{args.out}: wall {record['wall_s']} s on {record['device']}, {record['tasks']} tasks x k {record['k']}")
