"""The shipped ECov benchmark: format, splits, specs, and every task's reference and
trivial stimulus simulated on real Verilator."""

import re
import shutil

import pytest
import yaml

from chorus.harness import score_many
from chorus.tasks import DEFAULT_TASK_ROOT, DIFFICULTIES, TaskFormatError, load_task, load_tasks

TASKS = load_tasks(DEFAULT_TASK_ROOT)
IDS = [t.id for t in TASKS]


def test_benchmark_size_and_splits():
    assert len(TASKS) >= 30
    assert len(set(IDS)) == len(IDS)
    splits = {s: {t.id for t in load_tasks(DEFAULT_TASK_ROOT, s)} for s in ("train", "val", "test")}
    assert len(splits["test"]) >= 6 and len(splits["val"]) >= 3 and len(splits["train"]) >= 15
    assert not (splits["train"] & splits["val"] or splits["train"] & splits["test"] or splits["val"] & splits["test"])
    assert set().union(*splits.values()) == set(IDS)
    assert {t.difficulty for t in TASKS} == set(DIFFICULTIES)
    for split in ("train", "test"):
        assert {t.difficulty for t in TASKS if t.split == split} == set(DIFFICULTIES), split
    # every metric family the harness grades is used somewhere
    assert {m for t in TASKS for m in t.coverage_target} >= {"line", "branch", "toggle", "user"}


def _ports(task):
    """(name, direction, width) of the top-level ports, from the ANSI module header."""
    text = "".join(p.read_text() for p in task.rtl_files)
    header = re.search(rf"module\s+{task.toplevel}\s*\((.*?)\);", text, re.S)
    assert header, f"{task.id}: no ANSI header for module {task.toplevel}"
    ports, direction, width = [], None, 1
    for chunk in re.sub(r"//.*", "", header.group(1)).split(","):
        m = re.match(r"\s*(input|output)?\s*(?:logic|wire|reg)?\s*(\[(\d+):(\d+)\])?\s*(\w+)\s*$", chunk)
        assert m, f"{task.id}: cannot read port {chunk!r}"
        if m.group(1):
            direction, width = m.group(1), 1
        if m.group(2):
            width = abs(int(m.group(3)) - int(m.group(4))) + 1
        ports.append((m.group(5), direction, width))
    return ports


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_task_files_and_spec(task):
    assert task.reference_stimulus and task.trivial_stimulus, task.id
    for rtl in task.rtl_files:
        lines = rtl.read_text().count("\n")
        assert 10 <= lines <= 150, (rtl, lines)
    ports = _ports(task)
    assert ("clk", "input", 1) in ports and ("rst", "input", 1) in ports
    # the spec (the model's prompt) lists every port with its direction and width
    rows = {m.group(1): m.groups()[1:] for m in re.finditer(r"^\| `(\w+)` \| (\w+) \| (\d+)", task.spec, re.M)}
    assert rows == {name: (direction, str(width)) for name, direction, width in ports}
    for section in ("## Interface", "## Clock and reset", "## Behaviour"):
        assert section in task.spec, (task.id, section)
    assert "synchronous" in task.spec and "active high" in task.spec
    if "user" in task.coverage_target:
        assert "cover property" in "".join(task.rtl_text().values())


@pytest.fixture(scope="module")
def verdicts():
    """Reference and trivial stimulus of every task, scored in one parallel batch."""
    items = [(t, p.read_text()) for t in TASKS for p in (t.reference_stimulus, t.trivial_stimulus)]
    results = score_many(items, workers=2)
    return {t.id: (results[2 * i], results[2 * i + 1]) for i, t in enumerate(TASKS)}


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_reference_passes_and_trivial_fails(task, verdicts):
    reference, trivial = verdicts[task.id]
    assert reference.status == "ok", reference.detail
    for metric, target in task.coverage_target.items():
        assert reference.coverage[metric] >= target
    assert reference.passed and reference.score == 1.0
    assert trivial.status == "below_target", trivial.detail
    missed = [m for m, target in task.coverage_target.items() if trivial.coverage.get(m, 0) < target]
    assert missed and trivial.score < 1.0 and not trivial.passed


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("toplevel"), r"missing field\(s\): toplevel"),
        (lambda m: m.update(owner="me"), r"unknown field\(s\): owner"),
        (lambda m: m["coverage_target"].update(assertion=0.5), "unknown metric 'assertion'"),
        (lambda m: m["coverage_target"].update(line=1.5), "coverage_target.line"),
        (lambda m: m.update(id="other_name"), "differs from the folder name"),
        (lambda m: m.update(split="holdout"), "split"),
        (lambda m: m.update(rtl=["rtl/missing.sv"]), "RTL file not found"),
    ],
)
def test_loader_rejects_malformed_task(tmp_path, edit, message):
    folder = tmp_path / "up_counter"
    shutil.copytree(DEFAULT_TASK_ROOT / "up_counter", folder)
    meta = yaml.safe_load((folder / "task.yaml").read_text())
    edit(meta)
    (folder / "task.yaml").write_text(yaml.safe_dump(meta))
    with pytest.raises(TaskFormatError, match=message) as err:
        load_task(folder)
    assert "up_counter" in str(err.value)


def test_loader_rejects_invalid_yaml_and_missing_spec(tmp_path):
    folder = tmp_path / "up_counter"
    shutil.copytree(DEFAULT_TASK_ROOT / "up_counter", folder)
    (folder / "spec.md").unlink()
    with pytest.raises(TaskFormatError, match="no spec.md"):
        load_task(folder)
    (folder / "task.yaml").write_text("id: [unclosed\n")
    with pytest.raises(TaskFormatError, match="not valid YAML"):
        load_task(folder)
