"""Which of a model's runtime errors are widths copied wrong into a program's input table?
Reads recorded answers and their verdicts (benchmarks/learning_signal.py's
`gen_<model>.jsonl` and `scores_<model>.jsonl`, or the .gz copies in benchmarks/results/)
and counts the runtime errors whose message is a value too wide for its port
(`2 is not convertible to Logic`, `Int value (8) out of range for assignment of 3-bit
signal`), then those of them that the "dut" program style (chorus.synth.program) makes
impossible: the answer takes its widths from its table (`INPUTS.items()`) and the table
lists a port wider than the spec's interface table says (the port named by the message;
for an unnamed one-bit message, a one-bit port), on an input or on an output listed as one.

  PYTHONPATH=src python benchmarks/width_errors.py --manifest results/smollm2_h200/tasks/manifest.json \\
      benchmarks/results/learning_signal_sft_samples.jsonl.gz benchmarks/results/learning_signal_sft_scores.jsonl.gz
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recorded_answers import add_answer_arguments, emit, recorded_answers  # noqa: E402  (benchmarks/ is scripts)

WIDTH_ERROR = re.compile(r"is not convertible to Logic|out of range for assignment of (\d+)-bit signal \('(\w+)'\)")
SPEC_PORT = re.compile(r"^\| `(\w+)` \| (input|output) \| (\d+)", re.M)
TABLE = re.compile(r"^INPUTS = (\{.*?\})", re.M)


def classify(completion: str, detail: str, ports: dict[str, tuple[str, int]]) -> str:
    """Why a width error happened: `table_input` / `table_output` (a listed port wider in
    the table than in the design: the dut style cannot write it), or `elsewhere`."""
    table = TABLE.search(completion)
    if table is None or "INPUTS.items()" not in completion:
        return "elsewhere"
    try:
        listed = ast.literal_eval(table.group(1))
    except (ValueError, SyntaxError):
        return "elsewhere"
    too_wide = {name: ports[name] for name, width in listed.items()
                if name in ports and isinstance(width, int) and width > ports[name][1]}
    named = WIDTH_ERROR.search(detail)
    if named.group(2):  # the simulator named the port
        culprits = [too_wide[named.group(2)]] if named.group(2) in too_wide else []
    else:  # a value above 1 for a one-bit port
        culprits = [port for port in too_wide.values() if port[1] == 1]
    if not culprits:
        return "elsewhere"
    return "table_output" if all(direction == "output" for direction, _ in culprits) else "table_input"


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_answer_arguments(p)
    tasks, answers, scores = recorded_answers(p.parse_args(argv))
    specs = {task_id: task.spec for task_id, task in tasks.items()}
    counts = Counter(answers=len(scores))
    for score in scores:
        if score["status"] != "runtime_error":
            continue
        counts["runtime_errors"] += 1
        if not WIDTH_ERROR.search(score["detail"]):
            continue
        counts["width_errors"] += 1
        ports = {name: (direction, int(width)) for name, direction, width in SPEC_PORT.findall(specs[score["task_id"]])}
        counts["width_error_" + classify(answers[(score["task_id"], str(score["sample_id"]))], score["detail"], ports)] += 1
    return emit(dict(counts), None)


if __name__ == "__main__":
    main()
