"""The job graph: SFT stages x RL experts x merge strategies, as `snakemake -n` lists it."""

import re

from conftest import default_config, run_snakemake, write_config


def job_counts(output: str) -> dict[str, int]:
    """Parse the 'Job stats' table of a dry run into {rule: count}."""
    table = output[output.index("Job stats:") :]
    counts = {}
    for line in table.splitlines()[3:]:
        match = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match.group(1)] = int(match.group(2))
    return counts


def test_dag_3_stages_4_experts_5_merges(tmp_path):
    config = default_config()
    stages = ["s1", "s2", "s3"]
    config["sft"]["stages"] = [
        {"name": s, "mix": {"reference": ["easy"]}, "epochs": 1, "lr": 1e-3} for s in stages
    ]
    experts = [f"e{i}" for i in range(4)]
    config["rl"]["experts"] = [
        {"name": e, "from_stage": stages[i % 3], "reward": "dense"} for i, e in enumerate(experts)
    ]
    methods = ["linear", "task_arithmetic", "ties", "dare_ties", "slerp"]
    config["merge"]["strategies"] = [
        {"name": m, "method": m, "experts": experts[:2] if m == "slerp" else "all"}
        for m in methods
    ]
    config["consolidate"]["base_stage"] = "s3"
    shards = 3
    config["simulation"]["shards"] = shards
    path = write_config(tmp_path / "dag.yaml", config)
    proc = run_snakemake(["-n", "--nolock", "--forceall", "--configfile", str(path)])
    counts = job_counts(proc.stdout + proc.stderr)

    evaluated = 1 + len(stages) + len(experts) + len(methods) + 1  # base, sft, rl, merge, distill
    harvested = len(experts)  # every expert samples the train tasks for distillation
    expected = {
        "synth_shard": config["synth"]["shards"],  # the synthetic corpus, scattered
        "synth_corpus": 1,
        "prepare_tasks": 1,
        "preflight": 1,  # every score and RL job waits for it
        "build_base_model": 1,
        "sft_data": len(stages),
        "sft": len(stages),
        "rl": len(experts),
        "merge": len(methods),
        "generate": evaluated + harvested,
        "score_shard": (evaluated + harvested) * shards,
        "gather_scores": evaluated + harvested,
        "harvest_settings": 1,
        "consolidate_data": 1,
        "consolidate_sft": 1,
        "aggregate": 1,
        "report_tables": 1,
        "plots": 1,
        "all": 1,
    }
    assert counts.pop("total") == sum(expected.values())
    assert counts == expected

    # seeds: every expert trained and evaluated once more per extra seed, nothing else
    config["seeds"] = [0, 1]
    path = write_config(tmp_path / "seeds.yaml", config)
    proc = run_snakemake(["-n", "--nolock", "--forceall", "--configfile", str(path)])
    with_seeds = job_counts(proc.stdout + proc.stderr)
    assert with_seeds["rl"] == 2 * len(experts) and with_seeds["merge"] == len(methods)
    assert with_seeds["generate"] == expected["generate"] + len(experts)


def test_the_committed_reproduction_plans_every_stage_of_the_recipe(tmp_path):
    """config/experiments/smollm2_h200.yaml (make experiment): the real base model, the
    synthetic corpus, 3 SFT stages, 3 dense experts + the binary ablation, the five merge
    methods, distillation, and every model evaluated."""
    import yaml

    from conftest import REPO

    experiment = REPO / "config" / "experiments" / "smollm2_h200.yaml"
    config = yaml.safe_load(experiment.read_text())
    proc = run_snakemake(["-n", "--nolock", "--forceall", "--configfile", str(REPO / "config" / "gpu.yaml"),
                          str(experiment)], cwd=tmp_path)
    counts = job_counts(proc.stdout + proc.stderr)
    experts = config["rl"]["experts"]
    assert {e["reward"] for e in experts} == {"dense", "binary"} and sum(e["reward"] == "dense" for e in experts) >= 3
    assert len({e["from_stage"] for e in experts if e["reward"] == "dense"}) >= 3  # from different SFT stages
    methods = {m["method"] for m in config["merge"]["strategies"]}
    assert methods == {"linear", "task_arithmetic", "ties", "dare_ties", "slerp"}
    evaluated = 1 + len(config["sft"]["stages"]) + len(experts) + len(methods) + 1  # base .. distill
    assert counts["sft"] == len(config["sft"]["stages"]) >= 3 and counts["rl"] == len(experts)
    assert counts["merge"] == len(methods) and counts["consolidate_sft"] == 1
    assert counts["generate"] == evaluated + len(experts)  # + the experts' harvest for distillation
    assert counts["synth_shard"] == config["synth"]["shards"] and counts["build_base_model"] == 1
    # the evaluation protocol (docs/data_format.md): k >= 4 samples of >= 200 tasks
    assert config["eval"]["k"] >= 4 and config["synth"]["test_designs"] + 8 >= 200


def test_the_committed_corpus_holds_what_the_program_stage_trains_on(tmp_path):
    """benchmarks/data/corpus_smollm2_h200.tar.gz is the corpus `make experiment` runs on
    (marked up to date, not rebuilt): its synthetic train designs carry their verified
    programs, so the reproduction's first SFT stage trains on the recipe it names and not
    on the unrolled references a corpus of an older generator would fall back to."""
    import tarfile
    from collections import Counter

    import yaml

    from chorus.data import build_stage_dataset
    from chorus.tasks import load_manifest
    from conftest import REPO

    with tarfile.open(REPO / "benchmarks" / "data" / "corpus_smollm2_h200.tar.gz") as archive:
        archive.extractall(tmp_path, filter="data")
    (tmp_path / "tasks").symlink_to(REPO / "tasks")  # the shipped tasks, listed relative to the repository
    experiment = yaml.safe_load((REPO / "config" / "experiments" / "smollm2_h200.yaml").read_text())
    stage = experiment["sft"]["stages"][0]
    train = load_manifest(tmp_path / "results" / "smollm2_h200" / "tasks" / "manifest.json", "train", root=tmp_path)
    rows = build_stage_dataset(train, stage["mix"], tmp_path / "program.jsonl")
    synthetic = sum(t.source == "synthetic" for t in train)
    assert synthetic >= 600 and Counter(r["source"] for r in rows)["program"] >= 0.9 * synthetic
