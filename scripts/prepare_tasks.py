"""Resolve the task set (shipped ECov tasks, or a local CVDP JSONL) into a manifest."""

from chorus.io import script_logging
from chorus.tasks import load_tasks, write_manifest

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
    counts = {s: sum(t.split == s for t in tasks) for s in ("train", "val", "test")}
    print(f"{len(tasks)} tasks from {cfg['source']}: {counts}")
    write_manifest(tasks, snakemake.output.manifest, cfg["source"])
