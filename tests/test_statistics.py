"""Bootstrap intervals over tasks (chorus.metrics) and the summary table's interval and
comparison columns (chorus.report.summary_table), on hand-checkable inputs."""

import math

import numpy as np
import pandas as pd
import pytest

from chorus.metrics import bootstrap_interval, paired_bootstrap_interval
from chorus.report import ORACLE, summary_table


def test_a_model_that_passes_everything_or_nothing_has_a_point_interval():
    assert bootstrap_interval([1.0] * 40) == (1.0, 1.0)
    assert bootstrap_interval([0.0] * 40) == (0.0, 0.0)
    assert all(math.isnan(x) for x in bootstrap_interval([]))


def test_interval_width_matches_the_normal_approximation():
    # 200 passing and 200 failing tasks: mean 0.5, standard error 0.5 / sqrt(400) = 0.025,
    # so the 95% interval is about 0.5 +- 1.96 * 0.025 = [0.451, 0.549]
    values = [1.0] * 200 + [0.0] * 200
    low, high = bootstrap_interval(values, resamples=4000, seed=3)
    assert low == pytest.approx(0.451, abs=0.01) and high == pytest.approx(0.549, abs=0.01)
    # a higher confidence widens it, a lower one narrows it, all around the mean
    wide, narrow = bootstrap_interval(values, confidence=0.99), bootstrap_interval(values, confidence=0.5)
    assert wide[0] < low < narrow[0] < 0.5 < narrow[1] < high < wide[1]


def test_bootstrap_is_seeded():
    values = np.random.default_rng(0).random(30)
    assert bootstrap_interval(values, seed=7) == bootstrap_interval(values, seed=7)
    assert bootstrap_interval(values, seed=7) != bootstrap_interval(values, seed=8)
    # more resamples than one chunk of the index matrix gives the same kind of answer
    many = bootstrap_interval(values, resamples=300_000)
    assert many[0] < values.mean() < many[1]


def test_identical_models_differ_by_an_interval_of_exactly_zero():
    values = [1.0, 0.0, 0.5, 0.25, 1.0, 0.0, 0.0, 0.75]
    assert paired_bootstrap_interval(values, values) == (0.0, 0.0)
    low, high = bootstrap_interval(values)
    assert low < high  # each model alone is uncertain; their difference is not


def test_pairing_removes_the_shared_task_difficulty():
    # the same per-task ups and downs plus 0.1 on every task: the paired difference is
    # exactly 0.1, while the two separate intervals overlap widely
    rng = np.random.default_rng(1)
    baseline = rng.random(50) * 0.9
    better = baseline + 0.1
    assert paired_bootstrap_interval(better, baseline) == pytest.approx((0.1, 0.1))
    separate_baseline, separate_better = bootstrap_interval(baseline), bootstrap_interval(better)
    assert separate_better[0] < separate_baseline[1]
    # a difference on a few tasks only: the interval holds it and stays above zero
    gain = baseline.copy()
    gain[:20] += 0.1
    low, high = paired_bootstrap_interval(gain, baseline)
    assert 0 < low < 0.04 < high < 0.1


def test_bad_bootstrap_arguments_are_refused():
    with pytest.raises(ValueError, match="same tasks"):
        paired_bootstrap_interval([1, 0, 1], [1, 0])
    with pytest.raises(ValueError):
        bootstrap_interval([1, 0], resamples=0)
    with pytest.raises(ValueError):
        bootstrap_interval([1, 0], confidence=1.0)


def samples(model: str, passing_tasks, tasks: int = 10, k: int = 2) -> list[dict]:
    return [
        {"model": model, "task_id": f"t{t}", "sample_id": s, "passed": t in passing_tasks,
         "score": 1.0 if t in passing_tasks else 0.25}
        for t in range(tasks) for s in range(k)
    ]


def test_summary_intervals_and_comparisons_to_best_expert_and_oracle():
    per_sample = pd.DataFrame(
        samples("base/base", set())
        + samples("rl/a", set(range(5)))  # Pass@1 0.5: the best single expert
        + samples("rl/b", {5, 6, 7})  # 0.3, on tasks rl/a misses: the oracle reaches 0.8
        + samples("merge/all", set(range(10)))  # 1.0
        + samples("consolidated/same_as_a", set(range(5)))
    )
    summary = summary_table(per_sample, [1, 2], ["rl/a", "rl/b"], bootstrap={"resamples": 2000}).set_index("model")
    assert list(summary.index) == ["base/base", "rl/a", "rl/b", "merge/all", "consolidated/same_as_a", ORACLE]
    assert summary.loc[ORACLE, "pass@1"] == pytest.approx(0.8)
    # every Pass@1 lies in its interval; one that passes all or nothing has a point interval
    assert (summary["pass@1_lo"] <= summary["pass@1"]).all() and (summary["pass@1"] <= summary["pass@1_hi"]).all()
    assert tuple(summary.loc["base/base", ["pass@1_lo", "pass@1_hi"]]) == (0.0, 0.0)
    assert tuple(summary.loc["merge/all", ["pass@1_lo", "pass@1_hi"]]) == (1.0, 1.0)
    assert summary.loc["rl/a", "pass@1_lo"] < 0.5 < summary.loc["rl/a", "pass@1_hi"]

    merged = summary.loc["merge/all"]
    assert merged["best_expert"] == "rl/a"
    # +0.5 over rl/a: tasks 5-9 gained, none lost
    assert merged["vs_best_expert"] == pytest.approx(0.5)
    assert 0 < merged["vs_best_expert_lo"] < 0.5 < merged["vs_best_expert_hi"] <= 1
    # +0.2 over the oracle, from tasks 8 and 9 only: a resample without them (0.8^10 = 11%
    # of draws) gives 0, so the lower bound is 0
    assert merged["vs_oracle"] == pytest.approx(0.2)
    assert merged["vs_oracle_lo"] == 0.0 and merged["vs_oracle_hi"] > 0.2

    same = summary.loc["consolidated/same_as_a"]
    assert same["vs_best_expert"] == 0 and (same["vs_best_expert_lo"], same["vs_best_expert_hi"]) == (0.0, 0.0)
    # -0.3 against the oracle, lost on tasks 5-7 and never ahead: the interval ends at 0 at most
    assert same["vs_oracle"] == pytest.approx(-0.3)
    assert same["vs_oracle_lo"] < -0.3 < same["vs_oracle_hi"] <= 0
    # base, experts and the oracle are not compared
    assert summary.loc[["base/base", "rl/a", ORACLE], "vs_oracle"].isna().all()


def test_summary_intervals_follow_the_bootstrap_settings():
    rng = np.random.default_rng(0)
    per_sample = pd.DataFrame(
        {"model": model, "task_id": f"t{t}", "sample_id": s, "passed": bool(rng.random() < rate), "score": 0.5}
        for model, rate in (("rl/a", 0.4), ("rl/b", 0.3), ("merge/m", 0.5))
        for t in range(40) for s in range(4)
    )

    def run(**bootstrap):
        return summary_table(per_sample, [1], ["rl/a", "rl/b"], bootstrap=bootstrap).set_index("model")

    assert run(seed=1).equals(run(seed=1))
    assert not run(seed=1)["pass@1_lo"].equals(run(seed=2)["pass@1_lo"])
    wide, narrow = run(confidence=0.99), run(confidence=0.5)
    assert (wide["pass@1_lo"] < narrow["pass@1_lo"]).all() and (wide["pass@1_hi"] > narrow["pass@1_hi"]).all()
    assert wide.loc["merge/m", "vs_oracle_lo"] < narrow.loc["merge/m", "vs_oracle_lo"]
    # without experts there is nothing to compare with: the comparison columns stay empty
    alone = summary_table(per_sample, [2], None)
    assert list(alone.columns[:4]) == ["model", "pass@1", "pass@2", "pass@1_lo"]
    assert alone["vs_best_expert"].isna().all() and ORACLE not in set(alone["model"])


def test_gpu_config_evaluates_with_k_of_at_least_8():
    import copy

    import yaml
    from snakemake.utils import validate

    from chorus.plan import Plan
    from conftest import REPO, default_config

    def merged(base: dict, update: dict) -> dict:  # as snakemake --configfile merges
        out = copy.deepcopy(base)
        for key, value in update.items():
            out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        return out

    config = merged(default_config(), yaml.safe_load((REPO / "config" / "gpu.yaml").read_text()))
    validate(config, str(REPO / "config" / "config.schema.yaml"))
    assert config["eval"]["k"] >= 8 and 8 in config["eval"]["pass_at"]
    assert config["eval"]["bootstrap"]["resamples"] >= 1000
    assert Plan(config).model_dir("base", "base") == "results/models/base"  # the preset, converted
