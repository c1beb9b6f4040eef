"""The shipped ECov benchmark: format, splits, and every task's reference and trivial
stimulus simulated on real Verilator."""

import json
import shutil

import pytest
import yaml

from chorus.harness import score_many
from chorus.tasks import DEFAULT_TASK_ROOT, TaskFormatError, load_task, load_tasks

TASKS = load_tasks(DEFAULT_TASK_ROOT)
IDS = [t.id for t in TASKS]


def test_benchmark_size_and_splits():
    assert len(TASKS) >= 30
    splits = {s: {t.id for t in TASKS if t.split == s} for s in ("train", "val", "test")}
    assert len(splits["test"]) >= 6 and len(splits["val"]) >= 3 and len(splits["train"]) >= 15
    assert sum(len(s) for s in splits.values()) == len(TASKS)
    for split in ("train", "test"):
        assert {t.difficulty for t in TASKS if t.split == split} == {"easy", "medium", "hard"}
    for task in TASKS:
        assert task.reference_stimulus and task.trivial_stimulus, task.id
        assert task.toplevel in task.rtl_files[0].read_text()


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
    assert reference.score == 1.0
    assert trivial.status == "below_target", trivial.detail
    missed = [m for m, target in task.coverage_target.items() if trivial.coverage.get(m, 0) < target]
    assert missed and trivial.score < 1.0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("toplevel"), "missing field"),
        (lambda m: m.update(owner="me"), "unknown field"),
        (lambda m: m["coverage_target"].update(fsm=0.5), "unknown metric 'fsm'"),
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
