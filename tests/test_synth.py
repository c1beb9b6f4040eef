"""The synthetic task corpus: deterministic generators, every family verified in real
Verilator (one design each, shared build cache), held-out splits, the contamination
check, the stage mixes, and the synth rules in the workflow's job graph."""

import ast
import filecmp
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chorus.data import build_stage_dataset, program_stimulus
from chorus.harness import score_many
from chorus.prompts import extract_stimulus
from chorus.synth import all_families
from chorus.synth.contamination import check, normalise_rtl
from chorus.synth.corpus import (
    corpus_jobs,
    design_of,
    design_rng,
    gather_corpus,
    make_design,
    split_families,
    task_id,
    write_task,
)
from chorus.synth.design import width_text
from chorus.harness.coverage import parse_coverage_points
from chorus.synth.program import (
    BUDGET_CHOICES,
    PROGRAM_STYLES,
    Budget,
    draw_budgets,
    render_program,
    restyle_program,
)
from chorus.synth.verify import generate_and_verify, target_from
from chorus.tasks import DEFAULT_TASK_ROOT, TaskFormatError, load_task, load_tasks
from conftest import REPO, default_config, run_snakemake, write_config
from test_workflow_dag import job_counts

FAMILIES = list(all_families())


def test_at_least_15_families_listed_one_a_line():
    out = subprocess.run(
        [sys.executable, "-m", "chorus.synth.cli", "--list-families"], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == FAMILIES
    assert len(FAMILIES) >= 15
    assert any(f.combinational for f in all_families().values())


def _write(root, family, seed, split, index):
    tid = task_id(family, split, seed, index)
    design = make_design(family, seed, split, index)
    return write_task(design, root / tid, tid, split, 3, design_rng(seed, split, index + 10**6))


@pytest.mark.parametrize("family", FAMILIES)
def test_generator_is_deterministic_by_seed(tmp_path, family):
    first = _write(tmp_path / "a", family, 7, "train", 3)
    again = _write(tmp_path / "b", family, 7, "train", 3)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    _, mismatch, errors = filecmp.cmpfiles(first, again, [str(f) for f in files], shallow=False)
    assert not mismatch and not errors
    # other seeds give other designs (names, widths, options)
    others = {next(iter(make_design(family, s, "train", 3).files.values())) for s in range(8)}
    assert len(others) > 1


def test_held_out_families_and_parameter_ranges():
    cfg = default_config()["synth"]
    fams = split_families(cfg)
    assert len(cfg["test_families"]) >= 2
    assert not set(cfg["test_families"]) & set(fams["train"])
    assert set(cfg["test_families"]) <= set(fams["test"])
    jobs = corpus_jobs({**cfg, "train_designs": 60, "test_designs": 30})
    assert {f for s, _, f in jobs if s == "train"} == set(fams["train"])
    # the same family draws its size from disjoint ranges per split
    for family, key in (("counter", "width"), ("fsm", "states"), ("mux", "inputs")):
        train = {make_design(family, 0, "train", i).params[key] for i in range(12)}
        test = {make_design(family, 0, "test", i).params[key] for i in range(12)}
        assert max(train) < min(test), family


def test_target_from_measured_coverage():
    assert target_from({"line": 1.0, "branch": 0.93, "toggle": 0.874, "user": 1.0}) == {
        "line": 1.0,
        "branch": 0.9,
        "toggle": 0.85,
    }
    assert "toggle" not in target_from({"line": 1.0, "toggle": 0.02})


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    """One design of every family generated and verified in Verilator (2 stimuli each)."""
    out = tmp_path_factory.mktemp("synth")
    jobs = [("train", 0, f) for f in FAMILIES]
    stats = generate_and_verify(jobs, out, seed=0, variants=2, workers=2)
    return stats, {t.family: t for t in load_tasks(out)}


def test_every_family_verifies_in_simulation(verified):
    stats, tasks = verified
    assert stats["rejected"] == {} and stats["generator_errors"] == {}, stats
    assert sorted(tasks) == FAMILIES and stats["kept"] == len(FAMILIES)
    assert stats["examples"] == sum(len(t.references()) for t in tasks.values())
    # the claims verification wrote down hold when scored again: every kept reference
    # passes the measured target, the trivial stimulus runs but misses it
    items = [(t, p.read_text()) for t in tasks.values() for p in (*t.references(), t.trivial_stimulus)]
    results = iter(score_many(items, workers=2))
    for family, task in tasks.items():
        assert task.source == "synthetic" and task.coverage_target.get("line", 1.0) >= 0.8
        assert {"branch", "toggle"} <= set(task.coverage_target), task.coverage_target
        for _ in task.references():
            result = next(results)
            assert result.passed and result.status == "ok", (family, result.detail)
        trivial = next(results)
        assert trivial.status == "below_target" and not trivial.passed, (family, trivial.detail)


def test_combinational_families_need_no_clock(verified):
    _, tasks = verified
    for name, fam in all_families().items():
        task = tasks[name]
        text = "".join(p.read_text() for p in (*task.references(), task.trivial_stimulus))
        if fam.combinational:
            assert "posedge" not in "".join(task.rtl_text().values())
            assert "Clock" not in text and "Timer" in text
            assert "## Timing" in task.spec and "no clock" in task.spec
        else:
            assert "Clock(" in text and "## Clock and reset" in task.spec


def test_spec_lists_every_port(verified):
    _, tasks = verified
    for task in tasks.values():
        rtl = "".join(task.rtl_text().values())
        header = re.search(rf"module\s+{task.toplevel}\b.*?\((.*?)\);", rtl, re.S).group(1)
        ports = set(re.findall(r"(?:input|output)\s+\w+(?:\s+signed)?(?:\s*\[[^\]]+\])?\s+(\w+)", header))
        rows = set(re.findall(r"^\| `(\w+)` \|", task.spec, re.M))
        assert rows == ports, task.id


def _renamed_copy(source, dest):
    """`source` under a new id, every identifier renamed, comments and layout changed."""
    shutil.copytree(source.root, dest)
    meta = yaml.safe_load((dest / "task.yaml").read_text())
    meta.update(id=dest.name, split="train", toplevel="renamed_top")
    for rel in meta["rtl"]:
        text = (dest / rel).read_text().replace(source.toplevel, "renamed_top")
        for i, name in enumerate(sorted(set(re.findall(r"(?<![\w'])[a-z_][a-z0-9_]*\b", text)) - {"renamed_top"})):
            if name not in ("module", "endmodule", "input", "output", "logic", "wire", "reg", "always_ff",
                            "always_comb", "always", "posedge", "negedge", "if", "else", "begin", "end",
                            "case", "endcase", "default", "assign", "typedef", "enum", "or", "localparam"):
                text = re.sub(rf"(?<![\w']){name}\b", f"sig_{i}", text)
        (dest / rel).write_text("// planted copy\n" + text.replace("\n", "\n\n"))
    (dest / "task.yaml").write_text(yaml.safe_dump(meta))
    return load_task(dest)


def test_contamination_check_catches_a_planted_near_duplicate(tmp_path):
    shipped = load_tasks(DEFAULT_TASK_ROOT)
    train = [t for t in shipped if t.split == "train"]
    evaluation = [t for t in shipped if t.split != "train"]
    clean = check(train, evaluation, threshold=0.8)
    assert clean["passed"] and clean["max_similarity"] < 0.8 and len(clean["closest"]) == 10
    victim = next(t for t in evaluation if t.id == "alu8")
    planted = _renamed_copy(victim, tmp_path / "my_alu")
    assert normalise_rtl(planted.rtl_files[0].read_text()) == normalise_rtl(victim.rtl_files[0].read_text())
    report = check(train + [planted], evaluation, threshold=0.8)
    assert not report["passed"]
    assert report["violations"][0] == {"train": "my_alu", "eval": "alu8", "similarity": 1.0}
    assert report["closest"][0]["train"] == "my_alu"


@pytest.mark.slow
def test_contamination_stops_the_run(tmp_path):
    """prepare_tasks fails (and names the pair) when a train task copies a test task."""
    root = tmp_path / "tasks"
    shutil.copytree(DEFAULT_TASK_ROOT, root)
    _renamed_copy(load_task(root / "alu8"), root / "my_alu")
    config = default_config()
    config["tasks"]["root"] = str(root)
    config["synth"]["enabled"] = False
    path = write_config(tmp_path / "config.yaml", config)
    proc = run_snakemake(
        ["results/tasks/manifest.json", "--cores", "1", "--directory", str(tmp_path), "--configfile", str(path)],
        check=False,
        timeout=600,
    )
    assert proc.returncode != 0, proc.stdout[-2000:]
    log = (tmp_path / "results" / "logs" / "prepare_tasks.log").read_text()
    assert "train my_alu  ~  eval alu8" in log
    assert "above the contamination threshold" in proc.stdout + proc.stderr
    assert not (tmp_path / "results" / "tasks" / "manifest.json").exists()


def test_stage_mixes_select_by_family_source_and_variants(tmp_path, verified):
    _, tasks = verified
    shipped = load_tasks(DEFAULT_TASK_ROOT, "train")
    train = shipped + list(tasks.values())
    stages = {s["name"]: s["mix"] for s in default_config()["sft"]["stages"]}
    rows = {name: build_stage_dataset(train, mix, tmp_path / f"{name}.jsonl") for name, mix in stages.items()}
    trivial = {t.trivial_stimulus.read_text().strip() for t in train}
    for name, stage_rows in rows.items():
        completions = [r["completion"][0]["content"] for r in stage_rows]
        assert not any(c.split("```python\n")[1].split("```")[0].strip() in trivial for c in completions), name
    # format: one passing reference per task, the shortest of its verified stimuli
    assert [r["task_id"] for r in rows["format"]] == [t.id for t in train]
    assert {r["source"] for r in rows["format"]} == {"format"}
    for row, task in zip(rows["format"], train):
        shortest = min((p.read_text() for p in task.references()), key=len)
        assert shortest.strip() in row["completion"][0]["content"]
    # the stages differ in what they show
    ids = {name: sorted((r["task_id"], r["completion"][0]["content"]) for r in stage) for name, stage in rows.items()}
    assert ids["format"] != ids["easy"] != ids["full"]
    assert len(rows["full"]) == sum(len(t.references()) for t in train)
    synthetic = build_stage_dataset(train, {"format": True, "sources": ["synthetic"]}, tmp_path / "y.jsonl")
    assert {r["task_id"] for r in synthetic} == {t.id for t in tasks.values()}
    one = build_stage_dataset(train, {"reference": ["easy", "medium", "hard"], "families": ["fsm"]}, tmp_path / "f.jsonl")
    assert [r["task_id"] for r in one] == [tasks["fsm"].id]
    shipped_only = build_stage_dataset(train, {"format": True, "sources": ["shipped"]}, tmp_path / "s.jsonl")
    assert {r["task_id"] for r in shipped_only} == {t.id for t in shipped}


def test_corpus_listing_moves_with_the_run_folder(tmp_path, monkeypatch, verified):
    """A corpus built on one machine serves a run on another (a cluster node, the GPU
    machine): the listing names task folders relative to the workflow root, as given."""
    stats, tasks = verified
    built = tmp_path / "built"
    shard = built / "results" / "synth" / "shards" / "shard0"
    for task in tasks.values():
        shutil.copytree(task.root, shard / task.id)
    (built / "results" / "synth" / "shards" / "shard0.json").write_text(json.dumps(stats))
    monkeypatch.chdir(built)
    listing = gather_corpus(["results/synth/shards/shard0.json"], ["results/synth/shards/shard0"],
                            "results/synth/corpus.json")
    assert sorted(e["id"] for e in listing["tasks"]) == sorted(t.id for t in tasks.values())
    assert all(not Path(e["dir"]).is_absolute() for e in listing["tasks"])
    moved = tmp_path / "elsewhere"
    shutil.move(str(built), moved)
    monkeypatch.chdir(moved)
    entries = json.loads(Path("results/synth/corpus.json").read_text())["tasks"]
    assert sorted(load_task(e["dir"]).id for e in entries) == sorted(t.id for t in tasks.values())


@pytest.mark.slow
def test_synth_rules_scatter_in_the_dag(tmp_path):
    config = default_config()
    config["synth"].update(shards=5, train_designs=40, test_designs=10)
    path = write_config(tmp_path / "dag.yaml", config)
    proc = run_snakemake(["results/tasks/manifest.json", "-n", "--nolock", "--forceall", "--configfile", str(path)])
    counts = job_counts(proc.stdout + proc.stderr)
    assert counts["synth_shard"] == 5 and counts["synth_corpus"] == 1 and counts["prepare_tasks"] == 1
    # every design lands in exactly one shard
    jobs = corpus_jobs(config["synth"])
    from chorus.synth.corpus import shard_jobs

    shards = [shard_jobs(config["synth"], i, 5) for i in range(5)]
    assert sorted(sum(shards, [])) == sorted(jobs) and len(jobs) == 50
    config["synth"]["enabled"] = False
    path = write_config(tmp_path / "off.yaml", config)
    counts = job_counts(
        run_snakemake(["results/tasks/manifest.json", "-n", "--nolock", "--forceall", "--configfile", str(path)]).stdout
    )
    assert "synth_shard" not in counts and counts["prepare_tasks"] == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.update(source="scraped"), "field 'source'"),
        (lambda m: m.update(family="Bad Family"), "field 'family'"),
        (lambda m: m.update(variants=["stimulus/missing.py"]), "variant stimulus not found"),
    ],
)
def test_loader_checks_synthetic_fields(tmp_path, edit, message):
    folder = _write(tmp_path, "counter", 0, "train", 0)
    meta = yaml.safe_load((folder / "task.yaml").read_text())
    # as written: valid, every variant the generator listed
    assert meta["variants"] and load_task(folder).reference_variants == tuple(folder / v for v in meta["variants"])
    edit(meta)
    (folder / "task.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(TaskFormatError, match=message):
        load_task(folder)


def test_programmatic_reference_is_a_short_verified_variant(tmp_path, verified):
    """Every design gets a programmatic reference (chorus.synth.program): its table of
    inputs is the spec's (names and widths, clock and reset left out); when verification
    kept it, it is listed with the variants and the `program` mix trains on it alone."""
    _, tasks = verified
    kept = [t for t in tasks.values() if program_stimulus(t) is not None]
    assert len(kept) >= len(tasks) // 2, "most programs should reach their design's target"
    for task in kept:
        text = program_stimulus(task).read_text()
        design = design_of(task)
        table = re.search(r"^INPUTS = (\{.*\})", text, re.M).group(1)
        assert ast.literal_eval(table) == {p.name: p.width for p in design.inputs}
        for port in design.inputs:
            assert f"| `{port.name}` | input | {width_text(port)} |" in task.spec
        assert len(text) < 2000  # one short shape for every design
    shipped = load_tasks(DEFAULT_TASK_ROOT, "train")[:2]
    rows = build_stage_dataset(shipped + list(tasks.values()), {"program": True}, tmp_path / "program.jsonl")
    programs = [r for r in rows if r["source"] == "program"]
    assert [r["task_id"] for r in programs] == [t.id for t in kept]
    assert all("INPUTS = {" in r["completion"][0]["content"] for r in programs)
    # a task without a program (shipped, or a dropped program) trains on its reference
    others = [r for r in rows if r["source"] == "reference"]
    assert [r["task_id"] for r in others] == [t.id for t in shipped + list(tasks.values()) if t not in kept]
    # `program: dut`: the same programs in the style that reads the widths from the design
    dut_rows = build_stage_dataset(shipped + list(tasks.values()), {"program": "dut"}, tmp_path / "dut.jsonl")
    assert [r["task_id"] for r in dut_rows] == [r["task_id"] for r in rows]
    for table_row, dut_row in zip(programs, (r for r in dut_rows if r["source"] == "program")):
        design = design_of(next(t for t in kept if t.id == table_row["task_id"]))
        dut_text = extract_stimulus(dut_row["completion"][0]["content"])
        assert "INPUTS = [" in dut_text
        assert _as_table_program(dut_text, design) == extract_stimulus(table_row["completion"][0]["content"])


def test_restyle_program_finds_the_budget_or_refuses():
    """A program of any budget comes back in the other style at that budget; a text
    render_program did not write (an edited program) is refused, not guessed."""
    design = make_design("fifo", 0, "train", 0)
    for budget in draw_budgets(random.Random(3), 4):
        table, dut = (render_program(design, budget, style=style) for style in PROGRAM_STYLES)
        assert restyle_program(design, table, "dut") == dut
        assert restyle_program(design, dut, "table") == table
    with pytest.raises(ValueError, match="not a program"):
        restyle_program(design, table.replace("rng = random.Random(1)", "rng = random.Random(2)"), "dut")


def _as_table_program(dut_program: str, design) -> str:
    """A "dut" program written back in the table style: the inputs with their widths
    instead of the names, no widths read from the design."""
    lines = dut_program.splitlines(keepends=True)
    names = ast.literal_eval(re.search(r"^INPUTS = (\[.*\])", dut_program, re.M).group(1))
    width = {p.name: p.width for p in design.ports}
    table = "INPUTS = {" + ", ".join(f'"{n}": {width[n]}' for n in names) + "}  # input ports and their widths\n"
    lines = [table if line.startswith("INPUTS = [") else line for line in lines
             if not line.lstrip().startswith("widths = ")]
    return "".join(lines).replace("widths.items()", "INPUTS.items()")


@pytest.mark.parametrize("family", FAMILIES)
def test_dut_style_program_is_the_table_program_without_widths(family):
    """The "dut" style lists the input names only and reads the widths from the design;
    the rest of the program is the table style's, line for line."""
    design = make_design(family, 0, "train", 1)
    for budget in (Budget(), Budget(phases=2, cycles_per_phase=100, max_hold=4)):
        table, dut = (render_program(design, budget, "t", style) for style in PROGRAM_STYLES)
        listing = re.search(r"^INPUTS = (.*?)  #", dut, re.M).group(1)
        assert ast.literal_eval(listing) == [p.name for p in design.inputs]
        assert "widths = {name: len(getattr(dut, name)) for name in INPUTS}" in dut
        assert _as_table_program(dut, design) == table != dut
    with pytest.raises(ValueError, match="unknown program style"):
        render_program(design, style="widths")


def test_dut_style_reaches_the_table_styles_coverage_point_for_point(verified):
    """The two styles drive the same values: simulated in Verilator, one design of every
    family, the same verdict and the same replayed coverage, point for point and count
    for count. A short budget, so some designs miss their target and both verdicts occur."""
    _, tasks = verified
    budget = Budget(phases=2, cycles_per_phase=100, max_hold=4)
    items = [(task, render_program(design_of(task), budget, style=style))
             for task in tasks.values() for style in PROGRAM_STYLES]
    results = score_many(items, workers=2)
    for (task, _), table, dut in zip(items[::2], results[::2], results[1::2]):
        assert table.status in ("ok", "below_target"), (task.family, table.detail)
        assert (dut.status, dut.passed, dut.coverage) == (table.status, table.passed, table.coverage), task.family
        points = parse_coverage_points(table.coverage_dat)
        assert points and parse_coverage_points(dut.coverage_dat) == points, task.family
    assert {r.status for r in results} == {"ok", "below_target"}


def test_program_budgets_are_distinct_and_seeded():
    first, again = draw_budgets(random.Random("x"), 3), draw_budgets(random.Random("x"), 3)
    assert first == again and len(set(first)) == 3
    assert all(b.phases in BUDGET_CHOICES["phases"] for b in first)
