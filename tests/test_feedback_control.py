"""benchmarks/feedback_rounds.py's resample control: a later round redraws the original
prompt of every sample no earlier round passed; aggregated exactly like the rounds."""

import argparse
import importlib
import sys

import pytest
from conftest import REPO

from chorus.prompts import build_prompt
from chorus.rounds import attempts
from chorus.tasks import load_tasks

sys.path.insert(0, str(REPO / "benchmarks"))  # benchmarks/ is scripts, not a package
feedback_rounds = importlib.import_module("feedback_rounds")

TASKS = load_tasks(splits="test")[:2]
A, B = (t.id for t in TASKS)
ARGS = argparse.Namespace(bootstrap=200)


def _round(outcomes: dict[tuple[str, int], bool], tag: str) -> tuple[list[dict], list[dict]]:
    generations = [{"task_id": t, "sample_id": s, "completion": f"{tag} {t} {s}"} for t, s in outcomes]
    scores = [{"task_id": t, "sample_id": s, "passed": ok, "status": "ok" if ok else "below_target",
               "score": 1.0 if ok else 0.5, "feedback": "Result: ..."} for (t, s), ok in outcomes.items()]
    return generations, scores


FIRST = _round({(A, 0): True, (A, 1): False, (B, 0): False, (B, 1): False}, "r1")


def test_the_control_redraws_the_original_prompt_of_the_failed_samples_only():
    conversations = feedback_rounds.resample_conversations({t.id: t for t in TASKS}, attempts([FIRST]))
    assert sorted(conversations) == [(A, 1), (B, 0), (B, 1)]
    for (task_id, _), messages in conversations.items():
        assert messages == build_prompt(next(t for t in TASKS if t.id == task_id))  # no answer, no feedback
    feedback = feedback_rounds.next_conversations({t.id: t for t in TASKS}, attempts([FIRST]))
    assert sorted(feedback) == sorted(conversations) and feedback[(A, 1)] != conversations[(A, 1)]


def test_a_resampled_round_only_adds_passes():
    second = _round({(A, 1): True, (B, 0): False, (B, 1): False}, "r2")
    first_row, second_row = feedback_rounds.pass1_by_round(ARGS, [FIRST, second])
    assert first_row["pass1"] == pytest.approx((0.5 + 0.0) / 2)
    assert second_row["pass1"] == pytest.approx((1.0 + 0.0) / 2)
    # a failing redraw of a sample that had passed cannot take its pass away
    worse = _round({(A, 0): False, (A, 1): False, (B, 0): False, (B, 1): False}, "r2")
    assert feedback_rounds.pass1_by_round(ARGS, [FIRST, worse])[1]["pass1"] == first_row["pass1"]


def test_the_paired_difference_is_per_round_over_the_same_tasks():
    nothing = _round({(A, 1): False, (B, 0): False, (B, 1): False}, "r2")
    one_more = _round({(A, 1): False, (B, 0): True, (B, 1): False}, "r2")
    same = feedback_rounds.paired_by_round(ARGS, [FIRST, nothing], [FIRST, nothing])
    assert same == [{"round": 1, "difference": 0.0, "ci95": [0.0, 0.0]},
                    {"round": 2, "difference": 0.0, "ci95": [0.0, 0.0]}]
    first, second = feedback_rounds.paired_by_round(ARGS, [FIRST, nothing], [FIRST, one_more])
    assert first["difference"] == 0.0 and second["difference"] == pytest.approx(-0.25)
    assert second["ci95"][0] <= -0.25 <= second["ci95"][1] <= 0.0


def test_the_control_shares_round_one_and_keeps_its_later_rounds_apart(tmp_path):
    assert feedback_rounds.round_files(tmp_path, 1, "resample") == feedback_rounds.round_files(tmp_path, 1, "feedback")
    control, rounds = (set(feedback_rounds.round_files(tmp_path, 2, arm)) for arm in ("resample", "feedback"))
    assert not control & rounds
