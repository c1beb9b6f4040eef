"""Repair conversations for SFT (chorus.repair): weakened programs of a synthetic design,
their real simulation and feedback, the rows built from them, a tiny-model SFT step."""

import json
import sys
from dataclasses import replace

import pytest
from conftest import REPO, TINY_MODEL

from chorus.harness.feedback import feedback_field, round_feedback
from chorus.harness.score import score_generations
from chorus.io import write_jsonl
from chorus.modeling import build_tiny_model, load_tokenizer, task_corpus
from chorus.prompts import FEEDBACK_HEADING, build_prompt, extract_answer, format_completion
from chorus.repair import (
    SHORT_RUN,
    STYLE_WEAKNESSES,
    WEAKNESSES,
    repair_rows,
    row_tokens,
    weak_answers,
    weakened_program,
)
from chorus.synth.corpus import design_of, make_design
from chorus.synth.program import Budget, render_program

COUNTER = make_design("counter", 0, "train", 0)  # inputs inc (1 bit), load (1 bit), d (8 bits)


def _inputs_line(program: str) -> str:
    return next(line for line in program.splitlines() if line.startswith("INPUTS = "))


def test_each_weakness_changes_only_what_it_names():
    full = render_program(COUNTER, Budget())
    assert _inputs_line(full).startswith('INPUTS = {"inc": 1, "load": 1, "d": 8}')
    expected = {"port_left_out": '{"inc": 1, "load": 1}', "width_too_wide": '{"inc": 2, "load": 1, "d": 8}',
                "width_too_narrow": '{"inc": 1, "load": 1, "d": 4}'}
    for weakness, table in expected.items():
        weak = weakened_program(COUNTER, Budget(), weakness)
        assert _inputs_line(weak).startswith(f"INPUTS = {table}")
        assert weak.replace(_inputs_line(weak), "") == full.replace(_inputs_line(full), "")
    short = weakened_program(COUNTER, Budget(), "short_run")
    assert short == render_program(COUNTER, SHORT_RUN) != full
    assert weakened_program(COUNTER, SHORT_RUN, "short_run") is None  # nothing shorter to write


def test_the_dut_style_has_no_width_to_get_wrong():
    """A "dut" program reads its widths from the design: its weak answers are the port
    left out and the short run, both in that style."""
    full = render_program(COUNTER, Budget(), style="dut")
    left_out = weakened_program(COUNTER, Budget(), "port_left_out", "dut")
    assert _inputs_line(full).startswith('INPUTS = ["inc", "load", "d"]')
    assert _inputs_line(left_out).startswith('INPUTS = ["inc", "load"]')
    assert left_out.replace(_inputs_line(left_out), "") == full.replace(_inputs_line(full), "")
    assert weakened_program(COUNTER, Budget(), "short_run", "dut") == render_program(COUNTER, SHORT_RUN, style="dut")
    assert weakened_program(COUNTER, Budget(), "width_too_wide", "dut") is None
    assert weakened_program(COUNTER, Budget(), "width_too_narrow", "dut") is None
    rows = weak_answers({"a": (COUNTER, Budget()), "b": (COUNTER, Budget())}, style="dut")
    assert [(r["task_id"], r["weakness"]) for r in rows] == [
        ("a", "port_left_out"), ("b", "short_run"), ("a", "short_run"), ("b", "port_left_out")]
    assert all('INPUTS = ["' in r["completion"] for r in rows)
    assert STYLE_WEAKNESSES["table"] == WEAKNESSES


def test_weak_answers_spread_over_designs_and_weaknesses():
    designs = {"a": (COUNTER, Budget()), "b": (COUNTER, Budget())}
    rows = weak_answers(designs, [{"task_id": "a", "completion": "```python\nx\n```"}])
    assert [(r["task_id"], r["weakness"]) for r in rows[:4]] == [
        ("a", "port_left_out"), ("b", "width_too_wide"), ("a", "width_too_wide"), ("b", "width_too_narrow")]
    assert sorted(r["weakness"] for r in rows if r["task_id"] == "a") == sorted([*WEAKNESSES, "verify_budget"])
    for task_id in designs:  # sample ids unique within a task
        ids = [r["sample_id"] for r in rows if r["task_id"] == task_id]
        assert sorted(ids) == list(range(len(ids)))


def test_only_answers_that_failed_by_their_own_fault_become_rows(task):
    weak = [{"task_id": task.id, "sample_id": i, "completion": f"```python\n# weak {i}\n```", "weakness": w}
            for i, w in enumerate(["short_run", "port_left_out", "width_too_wide", "width_too_narrow"])]
    scores = [{"task_id": task.id, "sample_id": 0, "passed": True, "status": "ok", "feedback": "Result: ok"},
              {"task_id": task.id, "sample_id": 1, "passed": False, "status": "build_error", "feedback": "b"},
              {"task_id": task.id, "sample_id": 2, "passed": False, "status": "runtime_error", "feedback": "r"},
              {"task_id": task.id, "sample_id": 3, "passed": False, "status": "below_target", "feedback": "t"}]
    rows, stats = repair_rows(weak, scores, {task.id: task}, {task.id: "final"}, count=5)
    assert [r["prompt"][3]["content"] for r in rows] == [f"{FEEDBACK_HEADING}\nr", f"{FEEDBACK_HEADING}\nt"]
    assert stats["rows_by_weakness"] == {"width_too_wide": 1, "width_too_narrow": 1}
    assert len(repair_rows(weak, scores, {task.id: task}, {task.id: "final"}, count=1)[0]) == 1
    fitting, stats = repair_rows(weak, scores, {task.id: task}, {task.id: "final"}, count=5,
                                 fits=lambda row: not row["prompt"][3]["content"].endswith("\nt"))
    assert len(fitting) == 1 and stats["left_out_too_long"] == 1


# -- a real synthetic design: simulated weak answers, rows, an SFT step ------------------


@pytest.fixture(scope="module")
def counter_task(tmp_path_factory):
    """The counter design as a verified synthetic task (built and simulated here)."""
    from chorus.synth.verify import generate_and_verify
    from chorus.tasks import load_task

    folder = tmp_path_factory.mktemp("repair") / "corpus"
    stats = generate_and_verify([("train", 0, "counter")], folder, seed=0, variants=1, workers=2)
    return load_task(folder / stats["tasks"][0])


@pytest.fixture(scope="module")
def simulated(counter_task, tmp_path_factory):
    """The verified program of the design and its weak answers, all simulated with the
    rounds' feedback."""
    folder = tmp_path_factory.mktemp("repair_sim")
    design, tasks = design_of(counter_task), {counter_task.id: counter_task}
    final = [{"task_id": counter_task.id, "sample_id": 0,
              "completion": format_completion(render_program(design, Budget()))}]
    verified = score_generations(final, tasks, folder / "final.jsonl", extract=extract_answer, workers=2)
    weak = weak_answers({counter_task.id: (design, Budget())})
    scores = score_generations(weak, tasks, folder / "weak.jsonl", extract=extract_answer,
                               annotate=feedback_field, workers=2)
    return extract_answer(final[0]["completion"], "cocotb"), verified[0], weak, scores


def test_feedback_comes_from_the_weak_answers_own_simulation(counter_task, simulated):
    final, verified, weak, scores = simulated
    assert verified["passed"]
    by_weakness = {w["weakness"]: s for w, s in zip(weak, scores)}
    assert [s["sample_id"] for s in scores] == [w["sample_id"] for w in weak]
    left_out = by_weakness["port_left_out"]  # d never driven: its bits never toggle
    assert left_out["status"] == "below_target" and not left_out["passed"]
    holes = left_out["feedback"].split("Signals whose bits did not toggle both ways", 1)[1]
    assert "- d: never rose (0->1) in bits 0-7" in holes
    assert "target" in left_out["feedback"] and "NOT met" in left_out["feedback"]
    narrow = by_weakness["width_too_narrow"]  # d's upper half never driven
    assert narrow["status"] == "below_target" and "- d: never rose (0->1) in bits 4-7" in narrow["feedback"]
    wide = by_weakness["width_too_wide"]  # a 2 written to the 1-bit inc: the simulator refuses it
    assert wide["status"] == "runtime_error" and "| " in wide["feedback"]
    assert "not convertible" in wide["feedback"] or "out of range" in wide["feedback"]
    assert all(s["feedback"].startswith(f"Result: {s['status']}: ") for s in scores)


def test_dut_style_weak_answers_in_simulation(counter_task, simulated, tmp_path):
    """The "dut" style's weak answers fail as the table style's do (a port left out: its
    bits never toggle); an output listed among the inputs is no mistake there: driven
    with the width read from the design, the run goes on and passes (the score replays
    the inputs only), which is why it is not one of the style's weaknesses."""
    design, tasks = design_of(counter_task), {counter_task.id: counter_task}
    weak = weak_answers({counter_task.id: (design, Budget())}, style="dut")
    output = max((p for p in design.ports if p.direction == "output"), key=lambda p: p.width)
    listed = replace(design, ports=[*design.ports, replace(output, direction="input")])
    rows = [*weak, {"task_id": counter_task.id, "sample_id": len(weak), "weakness": "output_listed",
                    "completion": format_completion(render_program(listed, Budget(), style="dut"))}]
    assert _inputs_line(rows[-1]["completion"]).startswith(f'INPUTS = ["inc", "load", "d", "{output.name}"]')
    scores = {w["weakness"]: s for w, s in zip(rows, score_generations(
        rows, tasks, tmp_path / "weak.jsonl", extract=extract_answer, annotate=feedback_field, workers=2))}
    left_out = scores["port_left_out"]
    assert left_out["status"] == "below_target" and "- d: never rose (0->1) in bits 0-7" in left_out["feedback"]
    table_scores = {w["weakness"]: s for w, s in zip(simulated[2], simulated[3])}
    for weakness in ("port_left_out", "short_run"):  # the same run as the table style's
        assert {k: v for k, v in scores[weakness].items() if k.startswith("cov_") or k == "status"} == {
            k: v for k, v in table_scores[weakness].items() if k.startswith("cov_") or k == "status"}
    assert scores["output_listed"]["status"] == "ok" and scores["output_listed"]["passed"]


def test_width_errors_counts_what_the_dut_style_cannot_write(counter_task, tmp_path):
    """benchmarks/width_errors.py on simulated table-style answers: a one-bit input one
    bit wider (`not convertible`), an output listed with a wrong width (`out of range`,
    named), a literal too wide for the reset (not the table's: the dut style keeps it)."""
    sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks/ is scripts, not a package
    import width_errors
    design, tasks = design_of(counter_task), {counter_task.id: counter_task}
    output = next(p for p in design.ports if p.direction == "output" and p.width > 1)
    listed = replace(design, ports=[*design.ports, replace(output, direction="input", width=output.width + 1)])
    reset = f"dut.{design.clocking.reset}.value = {design.clocking.asserted}"
    programs = {"input": weakened_program(design, Budget(), "width_too_wide"),
                "output": render_program(listed, Budget()),
                "literal": render_program(design, Budget()).replace(reset, f"dut.{design.clocking.reset}.value = 2")}
    rows = [{"task_id": counter_task.id, "sample_id": i, "completion": format_completion(text)}
            for i, text in enumerate(programs.values())]
    scores = score_generations(rows, tasks, tmp_path / "scores.jsonl", extract=extract_answer, workers=2)
    assert [s["status"] for s in scores] == ["runtime_error"] * 3, [s["detail"] for s in scores]
    write_jsonl(tmp_path / "samples.jsonl", rows)
    (tmp_path / "manifest.json").write_text(json.dumps({"tasks": [{"dir": str(counter_task.root), "split": "train"}]}))
    counts = width_errors.main([str(tmp_path / "samples.jsonl"), str(tmp_path / "scores.jsonl"),
                                "--manifest", str(tmp_path / "manifest.json")])
    assert counts == {"answers": 3, "runtime_errors": 3, "width_errors": 3, "width_error_table_input": 1,
                      "width_error_table_output": 1, "width_error_elsewhere": 1}


def test_repair_rows_are_conversations_ending_in_the_verified_program(counter_task, simulated):
    final, _, weak, scores = simulated
    rows, stats = repair_rows(weak, scores, {counter_task.id: counter_task}, {counter_task.id: final}, count=10)
    failed = [(w, s) for w, s in zip(weak, scores) if not s["passed"]]
    assert len(rows) == stats["rows"] == len(failed) >= 3
    for row, (answer, score) in zip(rows, failed):
        assert row["source"] == "repair" and row["task_id"] == counter_task.id
        assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "user"]
        assert row["prompt"][:2] == build_prompt(counter_task)
        assert row["prompt"][2]["content"] == answer["completion"]
        assert row["prompt"][3]["content"] == f"{FEEDBACK_HEADING}\n{score['feedback']}"
        assert row["completion"] == [{"role": "assistant", "content": format_completion(final)}]


def test_nothing_of_the_reference_or_the_answer_reaches_the_feedback(counter_task, simulated):
    """The feedback holds the weak answer's own run only: no line of the task's
    reference stimuli, none of the verified program that the weak answer lacks."""
    final, _, weak, scores = simulated
    references = [p.read_text() for p in counter_task.references()]
    for answer, score in zip(weak, scores):
        own = answer["completion"]
        for text in [*references, final]:
            for line in text.splitlines():
                if len(line.strip()) > 10 and line.strip() not in own:
                    assert line.strip() not in score["feedback"], line


def test_the_feedback_is_the_rounds_feedback_of_that_answer(counter_task, simulated):
    """Simulating the weak answer again and building the rounds' feedback from its
    verdict gives the row's text (the runs are deterministic)."""
    from chorus.harness.score import score_many

    _, _, weak, scores = simulated
    answer, score = next((w, s) for w, s in zip(weak, scores) if w["weakness"] == "port_left_out")
    result = score_many([(counter_task, extract_answer(answer["completion"], "cocotb"))], workers=1)[0]
    assert round_feedback(counter_task, result) == score["feedback"]


def test_an_sft_step_trains_on_repair_rows(counter_task, simulated, tmp_path):
    from chorus.settings import SFTStage
    from chorus.sft import train_stage

    final, _, weak, scores = simulated
    model = tmp_path / "tiny"
    build_tiny_model(model, task_corpus([counter_task]), **{**TINY_MODEL, "max_position_embeddings": 8192})
    rows, _ = repair_rows(weak, scores, {counter_task.id: counter_task}, {counter_task.id: final}, count=2)
    tokenizer = load_tokenizer(model)
    assert all(0 < row_tokens(tokenizer, row) <= 8192 for row in rows)  # trained whole, not cut
    data = tmp_path / "repair.jsonl"
    write_jsonl(data, rows)
    metrics = train_stage(model, data, tmp_path / "sft", SFTStage(max_steps=1, lr=1e-4, batch_size=2,
                                                                   max_length=8192), use_cpu=True)
    assert metrics["steps"] == 1 and metrics["examples"] == 2 and metrics["first_loss"] > 0
    assert json.loads((tmp_path / "sft" / "train_metrics.json").read_text())["steps"] == 1
