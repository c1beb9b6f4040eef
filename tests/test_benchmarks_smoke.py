"""benchmarks/sft_synth_pass1.py --smoke end to end on CPU: a tiny synthetic corpus
verified in Verilator, a tiny model's SFT on it, sampling and sandbox scoring of base and
SFT model (the H200 run of issue 14 uses the same code with real sizes)."""

import importlib
import json
import sys
from collections import Counter

import pytest

from conftest import REPO

from chorus.harness import STATUSES


def _import_benchmark(name: str):
    sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks/ is scripts, not a package
    return importlib.import_module(name)


sft_synth = _import_benchmark("sft_synth_pass1")


def test_sft_synth_smoke_runs_every_phase_and_scores_every_sample(tmp_path):
    work, out = tmp_path / "work", tmp_path / "report.json"
    # the models can be evaluated in separate calls (one GPU lease per model)
    first = sft_synth.main(["--smoke", "--work", str(work), "--out", str(out), "--eval-models", "sft"])
    assert set(first["eval"]["models"]) == {"sft"} and "sft_minus_base" not in first["eval"]
    report = sft_synth.main(["--smoke", "--work", str(work), "--out", str(out)])
    assert report["eval"]["models"]["sft"] == first["eval"]["models"]["sft"]
    # each phase's record names the call that ran it, the report the latest call
    assert first["eval"]["models"]["sft"]["command"].endswith("--eval-models sft")
    assert report["eval"]["models"]["base"]["command"] == report["command"]
    assert report["sft"]["command"] == first["command"] != report["command"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    assert {"config", "corpus", "sft", "eval", "phase_seconds", "versions", "pass@1"} <= set(report)
    assert set(report["phase_seconds"]) == {"corpus", "sft", "eval"}
    corpus = report["corpus"]
    assert corpus["complete"] and corpus["designs"] == 3
    assert corpus["train_tasks"] >= 1 and corpus["train_examples"] >= corpus["train_tasks"]
    # the SFT data holds the verified synthetic stimuli and the shipped train references
    assert report["sft"]["rows_by_source"]["synthetic"] == corpus["train_examples"]
    assert report["sft"]["rows_by_source"]["shipped"] >= 1 and report["sft"]["steps"] >= 1
    evaluation = report["eval"]
    assert evaluation["test_tasks"] == corpus["test_tasks"] + 1  # + the first shipped test task
    for name in ("base", "sft"):
        model = evaluation["models"][name]
        assert model["samples"] == evaluation["test_tasks"] * evaluation["k"]
        assert model["samples_without_verdict"] == 0
        assert sum(model["statuses"].values()) == model["samples"]
        scores = [json.loads(line) for line in (work / f"scores_{name}.jsonl").read_text().splitlines()]
        assert len(scores) == model["samples"] and all(s["status"] in STATUSES for s in scores)
        assert Counter(s["status"] for s in scores) == {k: n for k, n in model["statuses"].items() if n}
        low, high = model["pass@1_ci95"]
        assert 0.0 <= low <= model["pass@1"] <= high <= 1.0
        assert set(model["per_task"]) == {s["task_id"] for s in scores}
    assert report["pass@1"] == {m: evaluation["models"][m]["pass@1"] for m in ("base", "sft")}
    gain = evaluation["sft_minus_base"]
    assert gain["tasks"] == evaluation["test_tasks"]
    assert gain["difference"] == pytest.approx(evaluation["models"]["sft"]["pass@1"] - evaluation["models"]["base"]["pass@1"])
    assert gain["ci95"][0] <= gain["difference"] <= gain["ci95"][1]
    # a second call finds every phase done: nothing reruns, the timings of the first run stay
    again = sft_synth.main(["--smoke", "--work", str(work), "--out", str(out)])
    assert again["eval"] == report["eval"] and again["phase_seconds"] == report["phase_seconds"]


learning_signal = _import_benchmark("learning_signal")


@pytest.mark.slow  # builds, trains and simulates
def test_learning_signal_smoke_runs_sft_rl_and_their_evaluation(tmp_path):
    """benchmarks/learning_signal.py --smoke: programs verified, SFT on the passing ones,
    a dense GRPO expert, both evaluated under the one protocol, the paired difference."""
    work, out = tmp_path / "work", tmp_path / "report.json"
    phases = ["verify", "build", "sft", "eval_sft", "rl", "eval_rl"]
    report = learning_signal.main(["--smoke", "--work", str(work), "--out", str(out), "--phases", *phases])
    done = report["phases"]
    assert set(done) == set(phases)
    verify = done["verify"]
    assert verify["programs"] == 2 * verify["designs"] and verify["passed"] >= 1
    # SFT learns exactly the verified programs, plus the shipped train references
    sft_rows = [json.loads(line) for line in (work / "sft_train.jsonl").read_text().splitlines()]
    assert Counter(r["source"] for r in sft_rows)["program"] == verify["passed"]
    assert done["sft"]["rows_by_source"] == dict(Counter(r["source"] for r in sft_rows))
    for model in ("sft", "rl"):
        evaluation = done[f"eval_{model}"]
        assert evaluation["protocol"]["k"] == report["k"] == 2
        assert evaluation["samples"] == evaluation["tasks"] * report["k"] == sum(evaluation["statuses"].values())
        generations = [json.loads(line) for line in (work / f"gen_{model}.jsonl").read_text().splitlines()]
        at_cap = sum(g["new_tokens"] >= evaluation["protocol"]["max_new_tokens"] for g in generations)
        assert evaluation["cutoff_fraction"] == at_cap / len(generations)
        low, high = evaluation["pass1_ci95"]
        assert 0.0 <= low <= evaluation["pass1"] <= high <= 1.0
    assert report["sft_pass1"] == done["eval_sft"]["pass1"] and report["rl_pass1"] == done["eval_rl"]["pass1"]
    low, high = report["rl_minus_sft_ci95"]
    assert low <= report["rl_minus_sft"] <= high
    assert done["rl"]["trained_steps"] >= 1 and done["rl"]["reward_per_call"]
    # the optimizer step in micro-batches (--rl-grad-accum), as the GPU run takes it
    assert done["rl"]["expert"]["grad_accum"] == 2 and done["rl"]["expert"]["batch_size"] == 2
    # --rl-tasks all (the default): the expert trains on every train task
    train, _ = learning_signal.task_sets(learning_signal.parse_args(["--smoke", "--work", str(work)]))
    assert done["rl"]["task_choice"] == {"rl_tasks": "all"} and done["rl"]["tasks"] == len(train)
    assert json.loads((work / "rl_model" / "rl_metrics.json").read_text())["tasks"] == [t.id for t in train]
    # the program alone on the evaluation's synthetic tasks: one row per task
    assert done["build"]["test"]["samples"] == done["build"]["test"]["tasks"] >= 1
    assert json.loads(out.read_text())["rl_pass1"] == report["rl_pass1"]


@pytest.mark.slow  # verifies programs, trains, samples and simulates
def test_learning_signal_probe_and_rl_on_unsolved_tasks(tmp_path):
    """probe: the SFT model's answers to every train task scored, one pass rate per task;
    --rl-tasks unsolved: GRPO trains on the tasks with a failing answer only, here in
    episodes of two rounds (--rl-rounds). The tiny
    model's answers fail, so one task's answers are its verified programs, put in the
    probe's generation journal (the probe resumes from it and samples the rest)."""
    work, out = tmp_path / "work", tmp_path / "r.json"
    common = ["--smoke", "--work", str(work), "--out", str(out)]
    learning_signal.main([*common, "--phases", "verify", "sft"])
    read = lambda name: [json.loads(line) for line in (work / name).read_text().splitlines()]  # noqa: E731
    verdicts = {(s["task_id"], s["sample_id"]): s["passed"] for s in read("scores_program_sft.jsonl")}
    programs: dict[str, list[dict]] = {}
    for row in read("programs_sft.jsonl"):
        if verdicts[(row["task_id"], row["sample_id"])]:
            programs.setdefault(row["task_id"], []).append(row)
    solved = next(tid for tid, rows in programs.items() if len(rows) == 2)  # the probe's k in --smoke
    (work / "gen_probe.jsonl.partial").write_text(
        "".join(json.dumps({**row, "new_tokens": 0}) + "\n" for row in programs[solved]))

    report = learning_signal.main([*common, "--phases", "probe", "rl", "--rl-tasks", "unsolved", "--rl-rounds", "2"])
    probe, rl = report["phases"]["probe"], report["phases"]["rl"]
    train, _ = learning_signal.task_sets(learning_signal.parse_args(common))
    scores = read("scores_probe.jsonl")
    assert len(scores) == probe["samples"] == 2 * len(train) == probe["protocol"]["k"] * len(train)
    for task in train:
        passed = [s["passed"] for s in scores if s["task_id"] == task.id]
        assert len(passed) == 2 and probe["per_task"][task.id] == pytest.approx(sum(passed) / 2)
    assert probe["per_task"][solved] == 1.0
    assert sum(probe["pass_histogram"].values()) == len(train) and probe["pass_histogram"]["2/2"] >= 1
    unsolved = [t.id for t in train if probe["per_task"][t.id] < 1.0]
    assert solved not in unsolved and unsolved
    assert json.loads((work / "rl_model" / "rl_metrics.json").read_text())["tasks"] == unsolved
    choice = rl["task_choice"]
    assert rl["tasks"] == len(unsolved) and choice["train_tasks"] == len(train)
    assert choice["rl_tasks"] == "unsolved" and choice["probe_pass_histogram"] == probe["pass_histogram"]
    assert choice["task_list_repeats"] == 1  # one prompt per rollout batch in --smoke
    # --rl-rounds 2: two-round episodes; the tiny model's first answers fail, so every
    # episode gets its feedback turn and answers again
    assert rl["expert"]["rounds"] == 2
    episodes = rl["round_episodes"]
    rows = rl["breakdown"]["rollout_batches"][0]["rows"]  # round 1 of the first rollout batch
    assert episodes and all(batch["rounds_used"] == {"2": rows} for batch in episodes)
    assert all(batch["feedback_tokens"] > 0 for batch in episodes)
    batches = rl["breakdown"]["rollout_batches"]  # each round's generation: a batch of every episode's rows
    assert [b["rows"] for b in batches] == [rows] * 2 * len(episodes)
    assert all(len(batch["simulation_s"]) == 2 for batch in episodes)


@pytest.mark.slow  # verifies programs, simulates weakened ones, trains
def test_learning_signal_sft_learns_repair_conversations(tmp_path):
    """--repair-rows: the SFT data gains repair rows (a weakened program, the feedback
    on its own simulation, then a program that passed verification) and trains on them."""
    from chorus.prompts import FEEDBACK_HEADING

    work = tmp_path / "work"
    report = learning_signal.main(["--smoke", "--work", str(work), "--out", str(tmp_path / "r.json"),
                                   "--phases", "verify", "sft", "--repair-rows", "8"])
    sft = report["phases"]["sft"]
    read = lambda name: [json.loads(line) for line in (work / name).read_text().splitlines()]  # noqa: E731
    rows = [r for r in read("sft_train.jsonl") if r["source"] == "repair"]
    assert 1 <= len(rows) == sft["rows_by_source"]["repair"] == sft["repair"]["rows"] <= 8
    verified = {(r["task_id"], r["completion"]) for r, s in zip(read("programs_sft.jsonl"),
                                                                read("scores_program_sft.jsonl")) if s["passed"]}
    weak = {(w["task_id"], w["completion"]): s for w, s in zip(read("programs_repair.jsonl"),
                                                                read("scores_repair.jsonl"))}
    for row in rows:
        (_, _, answer, feedback), final = row["prompt"], row["completion"][0]["content"]
        assert (row["task_id"], final) in verified
        score = weak[(row["task_id"], answer["content"])]
        assert not score["passed"] and feedback["content"] == f"{FEEDBACK_HEADING}\n{score['feedback']}"
    assert sft["steps"] >= 1


@pytest.mark.slow  # verifies programs, simulates weakened ones, trains
def test_learning_signal_program_style_dut_reaches_the_sft_rows(tmp_path):
    """--program-style dut: the verify phase scores programs that read their widths from
    the design, and SFT trains on them: its program rows and its repair rows (weak answer
    and final program) write no width; a work folder keeps the style it was verified in."""
    work = tmp_path / "work"
    common = ["--smoke", "--work", str(work), "--out", str(tmp_path / "r.json")]
    report = learning_signal.main([*common, "--phases", "verify", "sft", "--repair-rows", "8",
                                   "--program-style", "dut"])
    verify, sft = report["phases"]["verify"], report["phases"]["sft"]
    assert report["program_style"] == verify["program_style"] == "dut" and verify["passed"] >= 1
    read = lambda name: [json.loads(line) for line in (work / name).read_text().splitlines()]  # noqa: E731
    rows = read("sft_train.jsonl")
    programs = [r["completion"][0]["content"] for r in rows if r["source"] == "program"]
    repairs = [r for r in rows if r["source"] == "repair"]
    assert len(programs) == verify["passed"] and len(repairs) == sft["repair"]["rows"] >= 1
    texts = programs + [text for r in repairs for text in (r["prompt"][2]["content"], r["completion"][0]["content"])]
    for text in texts:
        assert 'INPUTS = ["' in text and "len(getattr(dut, name))" in text and "INPUTS = {" not in text
    assert set(sft["repair"]["rows_by_weakness"]) <= {"port_left_out", "short_run", "verify_budget"}
    with pytest.raises(SystemExit, match="give this style its own --work"):
        learning_signal.main([*common, "--phases", "sft"])  # the default style, "table"


feedback_rounds = _import_benchmark("feedback_rounds")


@pytest.mark.slow  # samples a tiny model and simulates its answers
def test_feedback_rounds_smoke_measures_pass1_after_each_round(tmp_path):
    """benchmarks/feedback_rounds.py --smoke: two rounds of a tiny model on one shipped
    test task; round 2 draws once per sample round 1 did not pass; Pass@1 per round with
    its interval and cost; a second call reads the finished rounds back."""
    work, out = tmp_path / "work", tmp_path / "report.json"
    report = feedback_rounds.main(["--smoke", "--rounds", "2", "--work", str(work), "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["tasks"] == 1 and report["k"] == 2 and report["command"].startswith("python benchmarks/")
    first, second = report["pass1_by_round"]
    assert (first["round"], second["round"]) == (1, 2)
    failed = sum(n for status, n in first["cost"]["statuses"].items() if status != "ok")
    assert first["cost"]["samples"] == 2 and second["cost"]["samples"] == failed
    for row in (first, second):
        assert 0.0 <= row["ci95"][0] <= row["pass1"] <= row["ci95"][1] <= 1.0
    assert second["pass1"] >= first["pass1"]
    rounds = [(json.loads(line) for line in (work / f"scores_r{r}.jsonl").read_text().splitlines()) for r in (1, 2)]
    assert all(row["feedback"].startswith("Result: ") for scores in rounds for row in scores)
    again = feedback_rounds.main(["--smoke", "--rounds", "2", "--work", str(work), "--out", str(out)])
    assert [r["pass1"] for r in again["pass1_by_round"]] == [first["pass1"], second["pass1"]]
    assert again["pass1_by_round"] == report["pass1_by_round"]  # read back (the same timings), not sampled again
    # the control: round 2 redraws the failed samples' original prompt, with round 2's seed
    control = feedback_rounds.main(["--smoke", "--rounds", "2", "--work", str(work), "--out", str(out),
                                    "--control", "resample"])
    assert control["pass1_by_round"] == report["pass1_by_round"]
    resampled_first, resampled = control["pass1_by_round_resample"]
    assert resampled_first == first  # round 1 is shared
    assert resampled["cost"]["samples"] == failed and resampled["cost"]["seed"] != first["cost"]["seed"]
    assert resampled["pass1"] >= first["pass1"]
    assert [r["round"] for r in control["feedback_minus_resample"]] == [1, 2]
    assert control["feedback_minus_resample"][0]["difference"] == 0.0
    drawn = [json.loads(line) for line in (work / "gen_r2_resample.jsonl").read_text().splitlines()]
    fed = [json.loads(line) for line in (work / "gen_r2.jsonl").read_text().splitlines()]
    assert [(g["task_id"], g["sample_id"]) for g in drawn] == [(g["task_id"], g["sample_id"]) for g in fed]


paired_evaluations = _import_benchmark("paired_evaluations")


def test_paired_evaluations_compares_two_recorded_evaluations_task_by_task(tmp_path):
    """benchmarks/paired_evaluations.py on two committed records: the difference is the
    mean per-task difference, inside its interval; the win counts add up; a record without
    the phase and two protocols that differ are refused."""
    results = REPO / "benchmarks" / "results"
    model, baseline = f"{results}/learning_signal_dut.json:eval_sft", f"{results}/learning_signal_binary_table.json:eval_sft"
    report = paired_evaluations.main([model, baseline, "--bootstrap", "200", "--out", str(tmp_path / "out.json")])
    ours = json.loads((results / "learning_signal_dut.json").read_text())["phases"]["eval_sft"]["per_task"]
    theirs = json.loads((results / "learning_signal_binary_table.json").read_text())["phases"]["eval_sft"]["per_task"]
    assert report["tasks"] == len(ours.keys() & theirs.keys()) == 208
    difference = report["model_minus_baseline"]
    assert difference["difference"] == pytest.approx(sum(ours[t] - theirs[t] for t in ours) / len(ours))
    assert difference["ci95"][0] <= difference["difference"] <= difference["ci95"][1]
    unchanged = sum(ours[t] == theirs[t] for t in ours)
    assert report["tasks_better"] + report["tasks_worse"] + unchanged == 208
    assert json.loads((tmp_path / "out.json").read_text()) == report
    with pytest.raises(SystemExit, match="no phase"):
        paired_evaluations.main([f"{results}/learning_signal_dut.json:eval_rl", baseline])
    other = json.loads((results / "learning_signal_binary_table.json").read_text())
    other["phases"]["eval_sft"]["protocol"]["k"] = 4
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="different protocols"):
        paired_evaluations.main([model, f"{tmp_path / 'other.json'}:eval_sft"])


interface_errors = _import_benchmark("interface_errors")

_FIFO_SPEC = """| Port | Direction | Width | Description |
|------|-----------|-------|-------------|
| `clk` | input | 1 | clock |
| `rst_n` | input | 1 | synchronous reset, active low |
| `wr` | input | 1 | write `din` (ignored when full) |
| `din` | input | 11 (`[10:0]`) | write data |
| `full` | output | 1 | 16 entries stored |
"""


@pytest.mark.parametrize(("inputs", "reset", "errors"), [
    ('["wr", "din"]', "[0, 1]", set()),
    ('{"wr": 1, "din": 11}', "[0, 1]", set()),  # the table style
    ('["wr"]', "[0, 1]", {"inputs_missing"}),
    ('["wr", "din", "in7"]', "[0, 1]", {"unknown_names"}),
    ('["wr", "din", "full"]', "[0, 1]", {"outputs_listed"}),
    ('["wr", "din"]', "[1, 0]", {"reset_left_asserted"}),  # active low, left at 0
])
def test_interface_errors_reads_inputs_and_reset_against_the_spec(inputs, reset, errors):
    first, last = json.loads(reset)
    code = (f"INPUTS = {inputs}\n\n\nasync def reset(dut):\n    dut.rst_n.value = {first}\n"
            f"    await Timer(1)\n    dut.rst_n.value = {last}\n")
    ports = interface_errors.interface(_FIFO_SPEC)
    assert ports["reset"] == "rst_n" and ports["active"] == 0 and ports["driven"] == {"wr", "din"}
    assert interface_errors.check(code, ports) == errors
    assert interface_errors.check("INPUTS = [", ports) == {"unparsed"}
