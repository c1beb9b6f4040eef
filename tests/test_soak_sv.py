"""A small soak of the SystemVerilog testbench path (benchmarks/soak.py --language
systemverilog runs the 2,000-candidate one): good, bad and hostile testbenches mixed,
scored through the replay (Run 1 records the instance's inputs, Run 2 replays them) on
real Verilator."""

import pytest
from test_soak import soak

from chorus.harness import svtb
from chorus.prompts import extract_answer

KINDS = soak.SV_KINDS


@pytest.fixture(scope="module")
def sv_tasks(tmp_path_factory):
    return soak.sv_soak_tasks(tmp_path_factory.mktemp("sv-soak-tasks"))


@pytest.mark.slow
def test_mixed_testbenches_each_get_exactly_their_one_verdict(tmp_path):
    count = len(KINDS) + 3
    # 8 s: a 1 GiB array element is zeroed before the next one fails; on a starved machine
    # (load 8 on 2 cores) that once took past 5 s, a timeout instead of memory
    report = soak.soak(count, workers=2, timeout_s=8, out_jsonl=tmp_path / "scores.jsonl", language="systemverilog")
    assert report["problems"] == []
    assert report["results_on_disk"] == report["distinct_sample_ids"] == count
    assert set(report["kinds"]) == set(KINDS)  # every kind of testbench took part
    assert report["passed"] == report["statuses"]["ok"] == report["kinds"]["reference"]
    assert report["leftover_sandbox_processes"] == 0 and report["leftover_candidate_folders"] == 0
    assert report["scorer_peak_during_soak_mb"] - report["scorer_rss_start_mb"] < 256


def test_the_mix_covers_both_tasks_and_is_deterministic(sv_tasks):
    assert [t.answer_language for t in sv_tasks] == ["systemverilog"] * 2
    assert {t.toplevel for t in sv_tasks} == set(soak.SV_TESTBENCHES)
    rows = soak.build_mix(200, sv_tasks, seed=5, kinds=KINDS)
    assert rows == soak.build_mix(200, sv_tasks, seed=5, kinds=KINDS)
    assert len({r["sample_id"] for r in rows}) == 200
    assert {r["task_id"] for r in rows} == {t.id for t in sv_tasks}
    fenced = [r for r in rows if r["completion"].startswith("```systemverilog\n")]
    assert 0 < len(fenced) < len(rows)
    # what the scorer gets from a fenced answer is a whole testbench module
    assert all(extract_answer(r["completion"], "systemverilog").lstrip().startswith("`timescale") for r in fenced)


def test_check_results_holds_sv_kinds_to_their_statuses(sv_tasks):
    rows = soak.build_mix(len(KINDS), sv_tasks, kinds=KINDS)
    good = [{"sample_id": r["sample_id"], "status": KINDS[r["kind"]].expected,
             "passed": KINDS[r["kind"]].expected == "ok", "detail": ""} for r in rows]
    assert soak.check_results(rows, good, KINDS) == []
    # a hostile testbench that passed, or a timeout reported as memory, is a problem
    passing = [dict(r, status="ok", passed=True) for r in good]
    assert len(soak.check_results(rows, passing, KINDS)) == len(rows) - 1  # all but the reference
    assert any("more than one" in p for p in soak.check_results(rows, good + good[:1], KINDS))


REFUSED_BY_THE_SCREEN = {
    "system_call": "$system",
    "fopen_forge": "$fopen",
    "reserved_name": "reserved",
    "defparam": "hierarchical references into `uut`",
}


@pytest.mark.parametrize("kind", sorted(REFUSED_BY_THE_SCREEN))
def test_hostile_kinds_are_what_they_claim(sv_tasks, kind):
    """Each refused kind is refused for its own reason (not, say, a typo that makes it a
    syntax error of another sort), on both designs: the scorer's screen reads them."""
    for task in sv_tasks:
        refusal = svtb.screen_testbench(KINDS[kind].body(task), task.instance)
        assert refusal and REFUSED_BY_THE_SCREEN[kind] in refusal, refusal


def test_instance_kinds_are_what_they_claim(sv_tasks):
    for task in sv_tasks:
        for kind, status, words in (("parameter_override", "syntax_error", "parameter overrides"),
                                    ("no_instance", "no_coverage", "no instance `uut`")):
            text = KINDS[kind].body(task)
            assert svtb.screen_testbench(text, task.instance) is None
            found_status, why = svtb.instance_problem(text, task)
            assert (found_status, words in why) == (status, True), why
        trivial = task.trivial_stimulus.read_text()
        assert svtb.screen_testbench(trivial, task.instance) is None and svtb.instance_problem(trivial, task) is None
