"""Designs -> task folders in the shipped format (docs/task_format.md, docs/synth.md).

Design `index` of a split is drawn from family `families[index % len(families)]` with a
random generator seeded by (seed, split, index) only, so a design is the same whichever
shard makes it and however many designs the corpus has.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import yaml

from chorus.synth import get_family
from chorus.synth.design import STYLES, Design, render_spec, render_stimulus, render_trivial
from chorus.synth.program import PROGRAM_FILE, draw_budgets, render_program
from chorus.tasks import Task

# written before verification; chorus.synth.verify replaces it by the measured target
PROVISIONAL_TARGET = {"line": 0.0, "branch": 0.0, "toggle": 0.0}


def design_rng(seed: int, split: str, index: int) -> random.Random:
    return random.Random(f"chorus-synth:{seed}:{split}:{index}")


def task_id(family: str, split: str, seed: int, index: int) -> str:
    return f"syn_{family}_{split}_s{seed}_{index:05d}"


_TASK_ID = re.compile(r"^syn_(?P<family>.+)_(?P<split>[a-z]+)_s(?P<seed>\d+)_(?P<index>\d+)$")


def make_design(family: str, seed: int, split: str, index: int) -> Design:
    return get_family(family).generate(design_rng(seed, split, index), split)


def design_of(task: Task) -> Design:
    """The design a synthetic task was generated from, made again from its id; raises
    ValueError when the id is not a synthetic one or the RTL differs (another generator)."""
    found = _TASK_ID.match(task.id)
    if not found:
        raise ValueError(f"{task.id} is not a synthetic task id")
    design = make_design(found["family"], int(found["seed"]), found["split"], int(found["index"]))
    if design.files != task.rtl_text():
        raise ValueError(f"{task.id}: the generator of this version writes other RTL")
    return design


def stimulus_variants(design: Design, rng: random.Random, count: int) -> list[str]:
    """Up to `count` distinct reference stimuli: the primary scenario first, then the
    other (scenario, coding style) pairs in a seeded order."""
    pairs = [(s, style) for s in range(len(design.scenarios)) for style in STYLES]
    primary = (0, rng.choice(STYLES))
    rest = [p for p in pairs if p != primary]
    rng.shuffle(rest)
    texts: list[str] = []
    for scenario, style in [primary, *rest]:
        text = render_stimulus(design, design.scenarios[scenario], style)
        if text not in texts:
            texts.append(text)
        if len(texts) == count:
            break
    return texts


def write_task(design: Design, folder: Path, tid: str, split: str, variants: int, rng: random.Random) -> Path:
    """Write one task folder (provisional target; verification sets the real one)."""
    folder = Path(folder)
    (folder / "rtl").mkdir(parents=True, exist_ok=True)
    (folder / "stimulus").mkdir(exist_ok=True)
    for name, text in design.files.items():
        (folder / "rtl" / name).write_text(text)
    (folder / "spec.md").write_text(render_spec(design))
    texts = stimulus_variants(design, rng, max(1, variants))
    (folder / "stimulus" / "reference.py").write_text(texts[0])
    (folder / PROGRAM_FILE).write_text(render_program(design, draw_budgets(rng, 1)[0]))
    extra = [PROGRAM_FILE]
    for i, text in enumerate(texts[1:], 1):
        rel = f"stimulus/variant_{i}.py"
        (folder / rel).write_text(text)
        extra.append(rel)
    (folder / "stimulus" / "trivial.py").write_text(render_trivial(design))
    meta = {
        "id": tid,
        "title": design.title,
        "difficulty": design.difficulty,
        "split": split,
        "toplevel": design.module,
        "rtl": [f"rtl/{n}" for n in design.files],
        "coverage_target": dict(PROVISIONAL_TARGET),
        "family": design.family,
        "source": "synthetic",
        "variants": extra,
        "tags": ["synthetic", "combinational" if design.clocking is None else "sequential"],
    }
    write_meta(folder, meta)
    (folder / "generator.yaml").write_text(yaml.safe_dump({"family": design.family, "params": design.params}))
    return folder


def write_meta(folder: Path, meta: dict) -> None:
    (Path(folder) / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))


def plan_designs(split: str, count: int, family_names: list[str]) -> list[tuple[int, str]]:
    """(index, family) of every design of a split: families in turn."""
    if count and not family_names:
        raise ValueError(f"synth: no families for the {split} split")
    return [(i, family_names[i % len(family_names)]) for i in range(count)]


def split_families(cfg: dict) -> dict[str, list[str]]:
    """Families of each split: the held-out `test_families` never make train tasks; test
    tasks come from every family (the train families with held-out parameter ranges)."""
    from chorus.synth import all_families

    known = list(all_families())
    chosen = known if cfg.get("families", "all") == "all" else list(cfg["families"])
    unknown = [f for f in chosen + list(cfg.get("test_families", [])) if f not in known]
    if unknown:
        raise ValueError(f"synth: unknown families {unknown} (known: {', '.join(known)})")
    held_out = [f for f in cfg.get("test_families", []) if f in chosen]
    return {"train": [f for f in chosen if f not in held_out], "test": chosen}


def corpus_jobs(cfg: dict) -> list[tuple[str, int, str]]:
    """Every design of the corpus as (split, index, family)."""
    fams = split_families(cfg)
    jobs = []
    for split, key in (("train", "train_designs"), ("test", "test_designs")):
        jobs += [(split, i, f) for i, f in plan_designs(split, cfg.get(key, 0), fams[split])]
    return jobs


def shard_jobs(cfg: dict, shard: int, shards: int) -> list[tuple[str, int, str]]:
    return corpus_jobs(cfg)[shard::shards]


def gather_corpus(stats_files: list, shard_dirs: list, out_json: str | Path) -> dict:
    """One listing of every verified task of the shards ({id, split, family, dir}) with
    the summed statistics; written atomically to `out_json`. Folders are listed as given
    (the workflow gives them relative to its root, as the shipped tasks are), so a corpus
    built on one machine serves a run on another."""
    import json
    from collections import Counter

    from chorus.io import atomic_write_json
    from chorus.tasks import load_task

    totals: Counter = Counter()
    rejected: Counter = Counter()
    by_family: Counter = Counter()
    wall = 0.0
    for path in stats_files:
        stats = json.loads(Path(path).read_text())
        totals.update({k: stats[k] for k in ("designs", "kept", "examples", "variants_dropped")})
        rejected.update(stats["rejected"])
        by_family.update(stats["kept_by_family"])
        wall += stats["wall_s"]
    tasks = []
    for folder in shard_dirs:
        for sub in sorted(Path(folder).iterdir()):
            if sub.is_dir() and not sub.name.startswith("."):
                task = load_task(sub)
                tasks.append({"id": task.id, "split": task.split, "family": task.family,
                              "examples": len(task.references()), "dir": str(sub)})
    splits = Counter(t["split"] for t in tasks)
    summary = {
        **dict(totals),
        "train_tasks": splits["train"],
        "test_tasks": splits["test"],
        "train_examples": sum(t["examples"] for t in tasks if t["split"] == "train"),
        "rejected": dict(sorted(rejected.items())),
        "kept_by_family": dict(sorted(by_family.items())),
        "shard_wall_s": round(wall, 1),
        "tasks": tasks,
    }
    atomic_write_json(out_json, summary)
    return summary
