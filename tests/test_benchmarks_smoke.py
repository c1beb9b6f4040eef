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
