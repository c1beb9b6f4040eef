"""Scoring an answer once (CoverageReward, harness.score.simulation_key): copies of one
simulated text share one simulation, within a reward call, across calls and with
simulations started early; other texts never share a verdict. Real Verilator runs of
the fixture design (tests using `task` are slow)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chorus.harness.sandbox import SandboxLimits
from chorus.harness.score import simulation_key, task_fingerprint
from chorus.harness.timeouts import TimeoutPolicy
from chorus.prompts import format_completion
from chorus.reward import CoverageReward


@pytest.fixture
def reward(task, cache):
    coverage = CoverageReward({task.id: task}, "dense", workers=2)
    yield coverage
    coverage.close()


def reference(task) -> str:
    return task.reference_stimulus.read_text()


def test_the_key_is_the_simulated_text_the_task_and_the_settings(task):
    """Prose outside the code block is not simulated and shares a key; any change to the
    simulated text (a blank line, a comment), the task, the seed or the limits makes
    another key. The key is the text byte for byte, not a normalised form."""
    coverage = CoverageReward({task.id: task}, "dense", workers=1)
    try:
        code = reference(task).strip()
        plain = coverage.key(task.id, format_completion(code))
        assert coverage.key(task.id, "Here is my answer:\n" + format_completion(code) + "\nDone.") == plain
        assert coverage.key(task.id, [{"role": "assistant", "content": format_completion(code)}]) == plain
        changed = [code.replace("\n", "\n\n", 1), code + "\n# a comment", code.replace("    ", "\t", 1), code.upper()]
        assert len({plain, *(coverage.key(task.id, format_completion(c)) for c in changed)}) == 1 + len(changed)
        # only the first python block is simulated: a second block is prose to the key
        assert coverage.key(task.id, format_completion(code) + "\n" + format_completion("raise SystemExit")) == plain
        assert coverage.key(task.id, format_completion("raise SystemExit") + "\n" + format_completion(code)) != plain
        # a completion with no code block is simulated whole: its prose is its text
        assert coverage.key(task.id, "no code") != coverage.key(task.id, "no code.")
    finally:
        coverage.close()
    fingerprint = task_fingerprint(task)
    base = simulation_key(fingerprint, "x")
    assert simulation_key(fingerprint, "x", seed=1) != base
    assert simulation_key(fingerprint, "x", limits=SandboxLimits(timeout_s=5)) != base
    assert simulation_key(fingerprint, "x", timeouts=TimeoutPolicy()) != base
    assert simulation_key(task_fingerprint(replace(task, coverage_target={"line": 0.1})), "x") != base


def test_copies_in_one_call_simulate_once_and_get_one_reward(reward, task):
    same = [format_completion(reference(task)), "Answer:\n" + format_completion(reference(task))]
    other = format_completion(reference(task) + "\n# the same code with a comment\n")
    rewards = reward([same[0], same[1], other], task_id=[task.id] * 3)
    assert rewards == [1.0, 1.0, 1.0]
    call = reward.calls[-1]
    assert (call["n"], call["simulated"], call["duplicates"], call["reused"]) == (3, 2, 1, 0)
    assert call["statuses"] == {"ok": 3}  # each completion still gets its verdict


def test_a_copy_in_a_later_call_takes_the_earlier_verdict(task, cache):
    coverage = CoverageReward({task.id: task}, "dense", workers=2, reuse_calls=1)
    try:
        answer = format_completion(reference(task))
        first = coverage.start(task.id, answer).result()
        assert coverage([answer], task_id=[task.id]) == [first.score] == [1.0]
        assert coverage.calls[-1]["simulated"] == 1
        weak = format_completion(task.trivial_stimulus.read_text())
        again = coverage.start(task.id, "Again:\n" + answer)  # served at once, no simulation
        assert again.done() and again.result() is not first
        assert again.result().coverage_dat == first.coverage_dat and again.result().score == first.score
        rewards = coverage(["Again:\n" + answer, weak], task_id=[task.id] * 2)
        assert rewards[0] == 1.0 and 0 < rewards[1] < 1
        call = coverage.calls[-1]
        assert (call["simulated"], call["duplicates"], call["reused"], call["started_early"]) == (1, 1, 1, 0)
        # reuse_calls=1: a verdict serves the one call after its own, then is drawn again
        coverage([weak, answer], task_id=[task.id] * 2)  # the weak verdict reused, the answer's expired
        assert (coverage.calls[-1]["simulated"], coverage.calls[-1]["reused"]) == (1, 1)
        coverage([weak], task_id=[task.id])  # the weak verdict served its one call: simulated again
        assert (coverage.calls[-1]["simulated"], coverage.calls[-1]["reused"]) == (1, 0)
    finally:
        coverage.close()


def test_a_copy_arriving_while_its_first_copy_simulates_waits_for_it(reward, task):
    answer = format_completion(reference(task))
    first = reward.start(task.id, answer)
    assert reward.start(task.id, "The same code:\n" + answer) is first  # no second simulation
    rewards = reward(["The same code:\n" + answer, answer], task_id=[task.id] * 2)
    assert rewards == [first.result().score] * 2 == [1.0, 1.0]
    call = reward.calls[-1]
    assert (call["simulated"], call["duplicates"], call["started_early"], call["reused"]) == (1, 1, 1, 0)


def test_a_failure_of_one_text_never_lands_on_another(reward, task):
    """A cached failing verdict belongs to its text alone: the same code plus a failing
    test fails, and the reference, asked next, is simulated and passes."""
    broken = format_completion(reference(task) + "\n\n@cocotb.test()\nasync def then_fails(dut):\n"
                               "    raise RuntimeError('broken')\n")
    assert reward([broken, broken], task_id=[task.id] * 2) == [0.0, 0.0]
    assert reward.calls[-1]["statuses"] == {"runtime_error": 2} and reward.calls[-1]["simulated"] == 1
    assert reward([format_completion(reference(task)), broken], task_id=[task.id] * 2) == [1.0, 0.0]
    call = reward.calls[-1]
    assert (call["simulated"], call["reused"]) == (1, 1)


def test_a_timeout_is_shared_within_its_call_only(task, cache):
    """A verdict that may come from the machine's load (here a timeout) is not reused by
    a later call: the same text is simulated again."""
    coverage = CoverageReward({task.id: task}, "dense", workers=2, limits=SandboxLimits(timeout_s=3))
    try:
        stuck = format_completion("import cocotb\nfrom cocotb.triggers import Timer\n\n\n@cocotb.test()\n"
                                  "async def forever(dut):\n    while True:\n        pass\n")
        assert coverage([stuck, stuck], task_id=[task.id] * 2) == [0.0, 0.0]
        assert coverage.calls[-1]["statuses"] == {"timeout": 2} and coverage.calls[-1]["simulated"] == 1
        coverage([stuck], task_id=[task.id])
        assert coverage.calls[-1]["simulated"] == 1 and coverage.calls[-1]["reused"] == 0
    finally:
        coverage.close()


def test_the_benchmark_counts_copies_with_the_rewards_key():
    """benchmarks/duplicate_answers.py groups recorded answers as the reward keys them:
    one recorded model's samples split into distinct answers and their copies."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    from duplicate_answers import answer_key, count_duplicates

    code = "import cocotb\n"
    assert answer_key("t", "Here:\n" + format_completion(code)) == answer_key("t", format_completion(code))
    assert answer_key("t", format_completion(code)) != answer_key("u", format_completion(code))
    counted = count_duplicates("rl_binary")
    assert counted["samples"] == 5 * counted["tasks"]
    assert sum(counted["tasks_by_distinct_answers"].values()) == counted["tasks"]
    assert sum(int(k) * v for k, v in counted["tasks_by_distinct_answers"].items()) == counted["distinct_answers"]
    assert 0 < counted["duplicate_fraction"] == round(1 - counted["distinct_answers"] / counted["samples"], 4)
