"""Does an answer drive the design's interface as its spec describes it? Reads recorded
answers and their verdicts (benchmarks/learning_signal.py's `gen_<model>.jsonl` and
`scores_<model>.jsonl`, or the .gz copies in benchmarks/results/) and checks each answer's
`INPUTS` (a list of names or a name -> width table, as chorus.synth.program writes them)
and its `reset` coroutine against the spec's interface table:

- `inputs_missing`: an input port other than the clock and the reset is not in `INPUTS`
  (never driven by the program's loops);
- `unknown_names`: `INPUTS` names a port the design does not have (a runtime error when
  it is driven);
- `outputs_listed`: `INPUTS` names an output (harmless when its width is right);
- `reset_left_asserted`: the last value `reset` writes to the reset port is its active
  level (the spec's "active low" / "active high"), so the design stays in reset;
- `unparsed`: the answer is not Python, or has no `INPUTS`.

Counts per verdict, and Pass@1 among the answers with none of the errors above
(`interface_right`) against the others: what the interface costs.

  PYTHONPATH=src python benchmarks/interface_errors.py --manifest results/smollm2_h200/tasks/manifest.json \\
      benchmarks/results/learning_signal_dut_sft_samples.jsonl.gz \\
      benchmarks/results/learning_signal_dut_sft_scores.jsonl.gz
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

from chorus.prompts import extract_answer  # noqa: E402

SPEC_ROW = re.compile(r"^\| `(\w+)` \| (input|output) \| \d+[^|]*\| (.*?) \|$", re.M)
ERRORS = ("inputs_missing", "unknown_names", "reset_left_asserted", "unparsed")


def interface(spec: str) -> dict:
    """The spec's ports: inputs (name -> description), outputs, and the reset's name and
    active level (None without a reset port)."""
    rows = SPEC_ROW.findall(spec)
    inputs = {name: text for name, direction, text in rows if direction == "input"}
    reset = next((name for name, text in inputs.items() if "reset" in text.lower()), None)
    active = 0 if reset and "active low" in inputs[reset].lower() else 1
    driven = {name for name, text in inputs.items() if name != reset and text.strip().lower() != "clock"}
    return {"inputs": set(inputs), "driven": driven, "outputs": {n for n, d, _ in rows if d == "output"},
            "reset": reset, "active": active}


def listed_inputs(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "INPUTS" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return {str(name) for name in value} if isinstance(value, (list, tuple, dict, set)) else None
    return None


def reset_writes(tree: ast.Module, port: str) -> list:
    """The constants the `reset` coroutine writes to `dut.<port>.value`, in source order."""
    for node in tree.body:
        if isinstance(node, (ast.AsyncFunctionDef, ast.FunctionDef)) and node.name == "reset":
            writes = [(n.lineno, n.value.value) for n in ast.walk(node) if isinstance(n, ast.Assign)
                      and isinstance(n.value, ast.Constant) and any(ast.unparse(t) == f"dut.{port}.value"
                                                                    for t in n.targets)]
            return [value for _, value in sorted(writes)]
    return []


def check(code: str, ports: dict) -> set[str]:
    """The interface errors of one answer (ERRORS, plus `outputs_listed`)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return {"unparsed"}
    listed = listed_inputs(tree)
    if listed is None:
        return {"unparsed"}
    errors = set()
    if ports["driven"] - listed:
        errors.add("inputs_missing")
    if listed - ports["inputs"] - ports["outputs"]:
        errors.add("unknown_names")
    if listed & ports["outputs"]:
        errors.add("outputs_listed")
    writes = reset_writes(tree, ports["reset"]) if ports["reset"] else []
    if writes and writes[-1] == ports["active"]:
        errors.add("reset_left_asserted")
    return errors


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_answer_arguments(p)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    tasks, answers, scores = recorded_answers(args)
    by_status: dict[str, Counter] = {}
    right, other = Counter(), Counter()
    for score in scores:
        task = tasks[score["task_id"]]
        code = extract_answer(answers[(score["task_id"], str(score["sample_id"]))], task.answer_language)
        errors = check(code, interface(task.spec))
        counts = by_status.setdefault(score["status"], Counter())
        counts.update(errors)
        counts["answers"] += 1
        group = other if errors & set(ERRORS) else right
        group["answers"] += 1
        group["passed"] += bool(score["passed"])
    report = {"by_status": {s: dict(c) for s, c in sorted(by_status.items())},
              "interface_right": {**right, "pass1": right["passed"] / max(1, right["answers"])},
              "interface_wrong": {**other, "pass1": other["passed"] / max(1, other["answers"])}}
    return emit(report, args.out)


if __name__ == "__main__":
    main()
