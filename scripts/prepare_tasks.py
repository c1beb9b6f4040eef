"""Resolve the task set (shipped ECov tasks or a local CVDP JSONL, plus the synthetic
corpus) into a manifest, after checking that no train task copies an evaluation task."""

import json

from chorus.io import atomic_write_json, script_logging
from chorus.synth.contamination import ContaminationError, check, format_pairs
from chorus.tasks import load_task, load_tasks, write_manifest

with script_logging(snakemake):
    cfg = snakemake.params.tasks
    tasks = load_tasks(cfg["root"])
    if cfg["source"] == "cvdp":
        from chorus.cvdp import convert_cvdp_jsonl

        # CVDP rows are the held-out evaluation set; training still uses the shipped
        # train/val tasks, never the shipped test tasks.
        converted = convert_cvdp_jsonl(
            cfg["cvdp_jsonl"],
            snakemake.params.converted_dir,
            target=cfg.get("cvdp_target"),
            split="test",
            average_of=cfg.get("cvdp_average_of"),
            white_box=cfg.get("cvdp_white_box", False),
        )
        tasks = [t for t in tasks if t.split != "test"] + converted
    for corpus in snakemake.input.synth:
        tasks += [load_task(entry["dir"]) for entry in json.loads(open(corpus).read())["tasks"]]
    train = [t for t in tasks if t.split == "train"]
    report = check(train, [t for t in tasks if t.split != "train"], snakemake.params.contamination_threshold)
    atomic_write_json(snakemake.output.contamination, report)
    print(f"contamination: max similarity {report['max_similarity']} (threshold {report['threshold']}); closest:")
    print(format_pairs(report["closest"][:5]))
    if not report["passed"]:
        raise ContaminationError(
            f"{len(report['violations'])} train/eval pair(s) above the contamination threshold "
            f"{report['threshold']}:\n{format_pairs(report['violations'][:10])}"
        )
    counts = {s: sum(t.split == s for t in tasks) for s in ("train", "val", "test")}
    synthetic = sum(t.source == "synthetic" for t in tasks)
    print(f"{len(tasks)} tasks from {cfg['source']} ({synthetic} synthetic): {counts}")
    write_manifest(tasks, snakemake.output.manifest, cfg["source"])
