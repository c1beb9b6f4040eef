"""Coverage-closure rounds of an evaluation (chorus.rounds, eval.rounds) on the tiny model
and the fixture design: two rounds end to end, resumption inside a round, the tables."""

import json

import pandas as pd
import pytest
from conftest import TINY_MODEL

from chorus.generate import sample_completions
from chorus.harness.feedback import feedback_field
from chorus.harness.score import score_generations
from chorus.io import read_jsonl
from chorus.modeling import build_tiny_model, load_tokenizer, task_corpus
from chorus.prompts import FEEDBACK_HEADING, extract_answer, format_completion, render_prompt
from chorus.report import per_sample_table, round_table, summary_table
from chorus.rounds import attempts, merged_rows, next_conversations, round_seed
from chorus.settings import Sampling

K = 3


@pytest.fixture(scope="module")
def tiny(task, tmp_path_factory):
    out = tmp_path_factory.mktemp("rounds") / "tiny"
    build_tiny_model(out, task_corpus([task]), **TINY_MODEL)
    return out


def _score(task, cache, generations, out):
    return score_generations(generations, {task.id: task}, out, cache_dir=cache, extract=extract_answer,
                             annotate=feedback_field, workers=2)


@pytest.fixture(scope="module")
def two_rounds(task, cache, tiny, tmp_path_factory):
    """Round 1: K samples of the tiny model, sample 0's answer replaced by the reference
    (it passes); round 2: the others again, with their feedback."""
    folder = tmp_path_factory.mktemp("two_rounds")
    sample_completions(tiny, [task], K, folder / "gen1.jsonl", Sampling(max_new_tokens=16), device="cpu")
    first = read_jsonl(folder / "gen1.jsonl")
    first[0]["completion"] = format_completion(task.reference_stimulus.read_text())
    scores1 = _score(task, cache, first, folder / "scores1.jsonl")
    conversations = next_conversations({task.id: task}, attempts([(first, scores1)]))
    sample_completions(tiny, [task], K, folder / "gen2.jsonl", Sampling(max_new_tokens=16), device="cpu",
                       seed=round_seed(0, 2), conversations=conversations)
    second = read_jsonl(folder / "gen2.jsonl")
    scores2 = _score(task, cache, second, folder / "scores2.jsonl")
    return folder, [(first, scores1), (second, scores2)], conversations


def test_the_second_round_continues_the_failed_samples_with_their_feedback(task, tiny, two_rounds):
    _, rounds, conversations = two_rounds
    (first, scores1), (second, scores2) = rounds
    assert scores1[0]["passed"] and not any(s["passed"] for s in scores1[1:])
    assert all(s["feedback"].startswith("Result: ") for s in scores1)
    # the passing sample is not drawn again; the others are, one completion each
    assert list(conversations) == [(task.id, 1), (task.id, 2)]
    assert [(r["task_id"], r["sample_id"]) for r in second] == [(task.id, 1), (task.id, 2)]
    for (_, sample_id), messages in conversations.items():
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[2]["content"] == first[sample_id]["completion"]
        assert messages[3]["content"] == f"{FEEDBACK_HEADING}\n{scores1[sample_id]['feedback']}"
    # the feedback is in the rendered prompt the model continued
    text = render_prompt(load_tokenizer(tiny), conversations[(task.id, 1)])
    assert scores1[1]["feedback"].splitlines()[0] in text


def test_merged_rows_pass_when_any_round_passes(task, two_rounds):
    _, rounds, _ = two_rounds
    rows = {r["sample_id"]: r for r in merged_rows(attempts(rounds), 2)}
    scores1 = {r["sample_id"]: r for r in rounds[0][1]}
    scores2 = {r["sample_id"]: r for r in rounds[1][1]}
    assert rows[0]["passed"] and rows[0]["passed_r1"] and rows[0]["passed_r2"] and rows[0]["rounds_used"] == 1
    assert rows[0]["score_r2"] == rows[0]["score_r1"] == scores1[0]["score"]
    for sample_id in (1, 2):
        assert rows[sample_id]["rounds_used"] == 2 and "feedback" not in rows[sample_id]
        assert rows[sample_id]["score_r1"] == scores1[sample_id]["score"]
        assert rows[sample_id]["score"] == rows[sample_id]["score_r2"] == scores2[sample_id]["score"]
        assert rows[sample_id]["passed_r2"] == (scores2[sample_id]["passed"] or scores1[sample_id]["passed"])
    # the tables: Pass@1 after each round, the round-1 column the one-round figure
    table = per_sample_table(list(rows.values()), model="base/base", sort=True)
    summary = summary_table(table, [1]).set_index("model").loc["base/base"]
    one_round = summary_table(per_sample_table(rounds[0][1], model="base/base"), [1]).set_index("model")
    assert summary["pass@1_r1"] == pytest.approx(one_round.loc["base/base", "pass@1"]) == pytest.approx(1 / K)
    assert summary["pass@1"] == pytest.approx(summary["pass@1_r2"])
    assert summary["pass@1_r2"] >= summary["pass@1_r1"]
    assert "pass@1_r1" not in one_round.columns
    curve = round_table(table)
    assert list(curve["round"]) == [1, 2] and curve["pass@1_lo"].le(curve["pass@1"]).all()


def test_the_rounds_plot_is_drawn(two_rounds, tmp_path):
    from chorus.report import plot_rounds

    _, rounds, _ = two_rounds
    table = per_sample_table(merged_rows(attempts(rounds), 2), model="base/base")
    plot_rounds(table, tmp_path / "rounds.png", {"resamples": 50})
    assert (tmp_path / "rounds.png").read_bytes()[:4] == b"\x89PNG"


def test_a_round_resumes_where_it_stopped(task, tiny, two_rounds):
    folder, _, conversations = two_rounds
    again = folder / "again2.jsonl"
    kept = {"task_id": task.id, "sample_id": 1, "completion": "KEPT", "new_tokens": 1}
    again.with_name("again2.jsonl.partial").write_text(json.dumps(kept) + "\n")
    stats = sample_completions(tiny, [task], K, again, Sampling(max_new_tokens=16), device="cpu", seed=round_seed(0, 2),
                               conversations=conversations)
    rows = read_jsonl(again)
    assert stats["resumed"] == 1 and stats["generated"] == 1
    assert [(r["sample_id"], r["completion"] == "KEPT") for r in rows] == [(1, True), (2, False)]
    assert not again.with_name("again2.jsonl.partial").exists()


def test_a_round_refuses_score_rows_without_feedback(task, two_rounds):
    _, rounds, _ = two_rounds
    first, scores1 = rounds[0]
    bare = [{k: v for k, v in row.items() if k != "feedback"} for row in scores1]
    with pytest.raises(ValueError, match="without feedback"):
        next_conversations({task.id: task}, attempts([(first, bare)]))
    with pytest.raises(ValueError, match="no score"):
        attempts([(first, bare[1:])])


def test_two_rounds_through_the_workflow_and_a_resumed_round(tmp_path):
    """eval.rounds: 2 on the fixture design with the embedded tiny model: round 2's jobs
    run after round 1's, the per-sample table has both rounds; a round-2 generation
    killed after one sample resumes with that sample kept."""
    import shutil

    from conftest import FIXTURE_TASK, default_config, run_snakemake, write_config

    shutil.copytree(FIXTURE_TASK, tmp_path / "tasks" / FIXTURE_TASK.name)
    config = default_config()
    config["tasks"]["root"] = str(tmp_path / "tasks")
    config["synth"]["enabled"] = False
    config["eval"].update(rounds=2, k=2, max_new_tokens=16)
    path = write_config(tmp_path / "config.yaml", config)
    pool = tmp_path / "results" / "eval" / "base" / "base"
    target = "results/eval/base/base/per_sample.csv"
    run_snakemake([target, "--cores", "2", "--directory", str(tmp_path), "--configfile", str(path)])
    table = pd.read_csv(pool / "per_sample.csv")
    assert list(table["sample_id"]) == [0, 1]
    assert {"passed_r1", "passed_r2", "score_r1", "score_r2", "rounds_used"} <= set(table.columns)
    assert "feedback" not in table.columns
    first = {r["sample_id"]: r for r in read_jsonl(pool / "scores" / "shard0.jsonl")
             + read_jsonl(pool / "scores" / "shard1.jsonl")}
    assert all(r["feedback"].startswith("Result: ") for r in first.values())
    failed = sorted(i for i, r in first.items() if not r["passed"])
    second = read_jsonl(pool / "round2" / "generations.jsonl")
    assert [r["sample_id"] for r in second] == failed and (table["rounds_used"] == 2).sum() == len(failed)
    # round 2 killed after its first sample: its journal holds it, nothing after it exists
    generations = pool / "round2" / "generations.jsonl"
    kept = dict(second[0], completion="KEPT")
    for done in (generations, pool / "per_sample.csv", *(pool / "round2" / "scores").glob("*.jsonl")):
        done.unlink()
    generations.with_name("generations.jsonl.partial").write_text(json.dumps(kept) + "\n")
    run_snakemake([target, "--cores", "2", "--directory", str(tmp_path), "--configfile", str(path)])
    again = read_jsonl(generations)
    assert again[0]["completion"] == "KEPT" and [r["sample_id"] for r in again] == failed
    log = (tmp_path / "results" / "logs" / "generate" / "eval" / "base" / "base" / "round2.log").read_text()
    assert "'resumed': 1" in log


def test_a_two_round_grpo_step(task, tiny, tmp_path):
    """rl.rounds: 2 on the tiny model: each episode's answer is simulated, the failed ones
    get their feedback as a user turn and answer again (TRL's rollout_func); the
    feedback tokens are masked out of the loss and the reward is the last answer's."""
    from chorus.rl import train_expert
    from chorus.rollouts import RoundEpisodes
    from chorus.settings import GRPOExpert

    seen = {}
    rollout = RoundEpisodes.__call__

    def recorded(self, prompts, trainer):  # the rollout's output, as TRL receives it
        seen["output"] = output = rollout(self, prompts, trainer)
        return output

    RoundEpisodes.__call__ = recorded
    try:
        metrics = train_expert(tiny, [task], tmp_path / "expert",
                               GRPOExpert(steps=1, num_generations=2, batch_size=2, max_completion_length=12, rounds=2),
                               sim_workers=2, use_cpu=True)
    finally:
        RoundEpisodes.__call__ = rollout
    assert metrics["steps"] == 1 and metrics["rounds"] == 2
    (episodes,) = metrics["round_episodes"]
    output = seen["output"]
    # the tiny model never passes: every episode has two answers and one feedback turn
    assert episodes["rounds_used"] == [2, 2] and all(n > 0 for n in episodes["feedback_tokens"])
    # each round's cost: both episodes answer twice, each round's generation a timed batch of 2
    # rows, each round's simulations timed
    assert [(b["rows"], b["s"] > 0) for b in metrics["breakdown"]["rollout_batches"]] == [(2, True), (2, True)]
    assert len(episodes["simulation_s"]) == 2 and min(episodes["simulation_s"]) >= 0
    tokenizer = load_tokenizer(tiny)
    for ids, mask, last in zip(output["completion_ids"], output["env_mask"], output["final_answer"]):
        assert len(ids) == len(mask) and 0 in mask and mask[-1] == 1
        masked = tokenizer.decode([t for t, m in zip(ids, mask) if m == 0], skip_special_tokens=True)
        assert masked.strip().startswith(FEEDBACK_HEADING) and "Result: " in masked  # the feedback turn, not trained on
        # the last answer is what the model said after the feedback
        assert tokenizer.decode(ids[len(mask) - mask[::-1].index(0):], skip_special_tokens=True) == last
    (call,) = metrics["reward_calls"]
    assert call["n"] == 2 and sum(call["statuses"].values()) == 2  # rewarded once per episode
    # the trainer counts the model's tokens only: two answers of at most 12 tokens each
    (step,) = [entry for entry in metrics["log_history"] if "completions/mean_length" in entry]
    model_tokens = [sum(mask) for mask in output["env_mask"]]
    assert step["completions/mean_length"] == sum(model_tokens) / len(model_tokens) and max(model_tokens) <= 24


def test_the_episode_reward_is_the_last_answers(task, cache):
    """final_answer_reward scores the `final_answer` column, not TRL's whole completion."""
    from chorus.reward import CoverageReward
    from chorus.rollouts import final_answer_reward

    coverage = CoverageReward({task.id: task}, "dense", workers=2)
    try:
        reward = final_answer_reward(coverage)
        reference = format_completion(task.reference_stimulus.read_text())
        episode = reference + "\n## Harness feedback\n...\n" + "not python ("  # the first block is not the last answer
        assert reward.__name__ == "coverage_dense"
        assert reward([episode], task_id=[task.id], final_answer=["not python ("]) == [0.0]
        assert reward(["not python ("], task_id=[task.id], final_answer=[reference]) == [1.0]
        assert reward([reference], task_id=[task.id]) == [1.0]  # one-round episodes: the completion itself
    finally:
        coverage.close()


def test_an_episode_that_passed_early_is_not_simulated_again_for_its_reward(task, cache):
    """RoundEpisodes simulates answers in the coverage reward's sandboxes: the reward
    call takes the result of an answer the episode already simulated."""
    from chorus.reward import CoverageReward
    from chorus.rollouts import RoundEpisodes

    coverage = CoverageReward({task.id: task}, "dense", workers=2)
    try:
        reference = format_completion(task.reference_stimulus.read_text())
        (result,) = RoundEpisodes(coverage, {}, rounds=2)._score([(task.id, reference)])
        assert result.passed  # the episode ends after this round
        assert coverage([reference], task_id=[task.id]) == [result.score]
        assert coverage.calls[-1]["started_early"] == 1  # taken, not simulated again
    finally:
        coverage.close()
