"""ECov task format: loading, validation and splits (see docs/task_format.md)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

METRICS = ("line", "branch", "toggle", "expr", "user", "fsm")
# `average` in coverage_target: the mean of per-group grades, each group pooling some
# Verilator metrics; groups without points are left out (docs/cvdp.md: CVDP's Xcelium
# "overall average" of block / expression / toggle / FSM / assertion coverage)
AVERAGE = "average"
DEFAULT_AVERAGE_OF = {
    "block": ["line", "branch"],
    "expression": ["expr"],
    "toggle": ["toggle"],
    "fsm": ["fsm"],
    "assertion": ["user"],
}
ANSWER_LANGUAGES = ("cocotb", "systemverilog")
DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "val", "test")
SOURCES = ("shipped", "synthetic")  # hand-written benchmark tasks | made by chorus.synth
TASK_ID_RE = re.compile(r"^[a-z0-9_]+$")
_REQUIRED = {"id", "title", "difficulty", "split", "toplevel", "rtl", "coverage_target"}
_OPTIONAL = {"tags", "answer_language", "testbench", "coverage_average", "show_rtl", "coverage_exclude", "family", "source", "variants"}
# keys of a coverage_exclude entry -> what of a coverage point they match (docs/task_format.md)
EXCLUDE_KEYS = ("metric", "file", "line", "module", "comment")

DEFAULT_TASK_ROOT = Path(__file__).resolve().parents[2] / "tasks" / "ecov"


class TaskFormatError(ValueError):
    """A task folder or record does not follow docs/task_format.md."""


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    difficulty: str
    split: str
    toplevel: str
    rtl_files: tuple[Path, ...]
    spec: str
    coverage_target: dict[str, float]
    reference_stimulus: Path | None = None
    trivial_stimulus: Path | None = None
    root: Path | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    answer_language: str = "cocotb"  # cocotb module, or a SystemVerilog testbench file
    testbench_file: str | None = None  # systemverilog: the file the answer is saved as
    instance: str = "uut"  # systemverilog: the design's instance whose coverage counts
    coverage_average: dict[str, tuple[str, ...]] | None = None  # groups of `average`
    show_rtl: bool = True  # the prompt shows the RTL (white-box)

    def average_groups(self) -> dict[str, tuple[str, ...]]:
        """Group -> Verilator metrics pooled into that group's grade (for `average`)."""
        groups = self.coverage_average or DEFAULT_AVERAGE_OF
        return {name: tuple(metrics) for name, metrics in groups.items()}

    def graded_metrics(self) -> set[str]:
        """The Verilator metrics the verdict reads (the build must produce them)."""
        metrics = set(self.coverage_target) - {AVERAGE}
        if AVERAGE in self.coverage_target:
            metrics.update(m for group in self.average_groups().values() for m in group)
        return metrics
    # coverage points the task does not count (unreachable ones): each entry maps some of
    # EXCLUDE_KEYS to a glob; a point matching every key of an entry is excluded
    coverage_exclude: tuple[tuple[tuple[str, str], ...], ...] = field(default_factory=tuple)
    family: str | None = None  # design family (synthetic tasks: the generator's family)
    source: str = "shipped"
    # further verified reference stimuli (each passes the target), e.g. in other styles
    reference_variants: tuple[Path, ...] = field(default_factory=tuple)

    def references(self) -> list[Path]:
        """Every verified passing stimulus: the reference, then its variants."""
        return ([self.reference_stimulus] if self.reference_stimulus else []) + list(self.reference_variants)

    def rtl_text(self) -> dict[str, str]:
        """File name -> source text of every RTL file (what the prompt shows)."""
        return {p.name: p.read_text() for p in self.rtl_files}

    def design_hash(self) -> str:
        """Content hash of the design: the key of the Verilator build cache."""
        digest = hashlib.sha256(self.toplevel.encode())
        for path in self.rtl_files:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        needs_user = "user" in self.graded_metrics()
        digest.update(b"user" if needs_user else b"")
        return digest.hexdigest()[:16]


def _fail(where: str, message: str) -> TaskFormatError:
    return TaskFormatError(f"task {where}: {message}")


def validate_metadata(meta: object, where: str) -> dict:
    """Check a task.yaml mapping; returns it or raises TaskFormatError naming the field."""
    if not isinstance(meta, dict):
        raise _fail(where, "task.yaml must be a mapping")
    missing = _REQUIRED - meta.keys()
    if missing:
        raise _fail(where, f"missing field(s): {', '.join(sorted(missing))}")
    unknown = meta.keys() - _REQUIRED - _OPTIONAL
    if unknown:
        raise _fail(where, f"unknown field(s): {', '.join(sorted(unknown))}")
    for key in ("id", "title", "toplevel"):
        if not isinstance(meta[key], str) or not meta[key]:
            raise _fail(where, f"field '{key}' must be a non-empty string")
    if not TASK_ID_RE.match(meta["id"]):
        raise _fail(where, f"field 'id' must match {TASK_ID_RE.pattern}: {meta['id']!r}")
    if meta["difficulty"] not in DIFFICULTIES:
        raise _fail(where, f"field 'difficulty' must be one of {DIFFICULTIES}")
    if meta["split"] not in SPLITS:
        raise _fail(where, f"field 'split' must be one of {SPLITS}")
    rtl = meta["rtl"]
    if not isinstance(rtl, list) or not rtl or not all(isinstance(r, str) for r in rtl):
        raise _fail(where, "field 'rtl' must be a non-empty list of file paths")
    target = meta["coverage_target"]
    if not isinstance(target, dict) or not target:
        raise _fail(where, "field 'coverage_target' must be a non-empty mapping")
    for metric, value in target.items():
        if metric not in (*METRICS, AVERAGE):
            raise _fail(where, f"coverage_target: unknown metric {metric!r} (one of {(*METRICS, AVERAGE)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _fail(where, f"coverage_target.{metric} must be a number in [0, 1]")
    tags = meta.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _fail(where, "field 'tags' must be a list of strings")
    validate_average(meta.get("coverage_average"), where)
    if not isinstance(meta.get("show_rtl", True), bool):
        raise _fail(where, "field 'show_rtl' must be true or false")
    language = meta.get("answer_language", "cocotb")
    if language not in ANSWER_LANGUAGES:
        raise _fail(where, f"field 'answer_language' must be one of {ANSWER_LANGUAGES}")
    testbench = meta.get("testbench")
    if language == "systemverilog":
        if not isinstance(testbench, dict) or set(testbench) - {"file", "instance"} or "file" not in testbench:
            raise _fail(where, "answer_language systemverilog needs 'testbench: {file: <path>, instance: <name>}'")
        file = testbench["file"]
        if not isinstance(file, str) or not SV_FILE_RE.match(file) or ".." in file.split("/"):
            raise _fail(where, f"testbench.file must be a relative .sv/.v path, got {file!r}")
        instance = testbench.get("instance", "uut")
        if not isinstance(instance, str) or not IDENT_RE.match(instance):
            raise _fail(where, "testbench.instance must be an instance name")
    elif testbench is not None:
        raise _fail(where, "field 'testbench' is only for answer_language systemverilog")
    _validate_exclusions(meta.get("coverage_exclude", []), where)
    if "family" in meta and (not isinstance(meta["family"], str) or not TASK_ID_RE.match(meta["family"])):
        raise _fail(where, f"field 'family' must match {TASK_ID_RE.pattern}")
    if meta.get("source", "shipped") not in SOURCES:
        raise _fail(where, f"field 'source' must be one of {SOURCES}")
    variants = meta.get("variants", [])
    if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
        raise _fail(where, "field 'variants' must be a list of stimulus file paths")
    return meta


IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SV_FILE_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]*\.s?v$")


def validate_average(groups: object, where: str) -> dict[str, list[str]] | None:
    """Check a coverage_average mapping (group name -> non-empty list of metrics)."""
    if groups is None:
        return None
    if not isinstance(groups, dict) or not groups:
        raise _fail(where, "coverage_average must be a non-empty mapping group -> list of metrics")
    for name, metrics in groups.items():
        if not isinstance(metrics, list) or not metrics or any(m not in METRICS for m in metrics):
            raise _fail(where, f"coverage_average.{name} must be a non-empty list of metrics from {METRICS}")
    return groups


def _validate_exclusions(entries: object, where: str) -> None:
    if not isinstance(entries, list):
        raise _fail(where, "field 'coverage_exclude' must be a list of mappings")
    for number, entry in enumerate(entries, start=1):
        name = f"coverage_exclude entry {number}"
        if not isinstance(entry, dict) or not entry:
            raise _fail(where, f"{name} must be a non-empty mapping of {', '.join(EXCLUDE_KEYS)}")
        unknown = entry.keys() - set(EXCLUDE_KEYS)
        if unknown:
            raise _fail(where, f"{name}: unknown key(s) {', '.join(sorted(map(str, unknown)))} (one of {EXCLUDE_KEYS})")
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
                raise _fail(where, f"{name}: '{key}' must be a non-empty string or an integer")
        if "metric" in entry and entry["metric"] not in METRICS:
            raise _fail(where, f"{name}: unknown metric {entry['metric']!r} (one of {METRICS})")


def load_task(folder: str | Path) -> Task:
    folder = Path(folder)
    where = str(folder)
    meta_path = folder / "task.yaml"
    if not meta_path.is_file():
        raise _fail(where, "no task.yaml")
    try:
        meta = yaml.safe_load(meta_path.read_text())
    except yaml.YAMLError as err:
        raise _fail(where, f"task.yaml is not valid YAML: {err}") from err
    meta = validate_metadata(meta, where)
    if meta["id"] != folder.name:
        raise _fail(where, f"id {meta['id']!r} differs from the folder name {folder.name!r}")
    rtl_files = tuple(folder / r for r in meta["rtl"])
    for path in rtl_files:
        if not path.is_file():
            raise _fail(where, f"RTL file not found: {path.relative_to(folder)}")
    spec_path = folder / "spec.md"
    if not spec_path.is_file():
        raise _fail(where, "no spec.md")

    variants = tuple(folder / v for v in meta.get("variants", []))
    for path in variants:
        if not path.is_file():
            raise _fail(where, f"variant stimulus not found: {path.relative_to(folder)}")

    def optional(rel: str) -> Path | None:
        path = folder / rel
        return path if path.is_file() else None

    language = meta.get("answer_language", "cocotb")
    suffix = ".sv" if language == "systemverilog" else ".py"
    testbench = meta.get("testbench") or {}
    average = meta.get("coverage_average")

    return Task(
        id=meta["id"],
        title=meta["title"],
        difficulty=meta["difficulty"],
        split=meta["split"],
        toplevel=meta["toplevel"],
        rtl_files=rtl_files,
        spec=spec_path.read_text(),
        coverage_target={k: float(v) for k, v in meta["coverage_target"].items()},
        reference_stimulus=optional(f"stimulus/reference{suffix}"),
        trivial_stimulus=optional(f"stimulus/trivial{suffix}"),
        root=folder,
        tags=tuple(meta.get("tags", [])),
        answer_language=language,
        testbench_file=testbench.get("file"),
        instance=testbench.get("instance", "uut"),
        coverage_average={k: tuple(v) for k, v in average.items()} if average else None,
        show_rtl=meta.get("show_rtl", True),
        coverage_exclude=tuple(
            tuple(sorted((key, str(value)) for key, value in entry.items()))
            for entry in meta.get("coverage_exclude", [])
        ),
        family=meta.get("family"),
        source=meta.get("source", "shipped"),
        reference_variants=variants,
    )


def load_tasks(
    root: str | Path = DEFAULT_TASK_ROOT,
    splits: str | list[str] | tuple[str, ...] | None = None,
) -> list[Task]:
    """All tasks under `root` (sorted by id), optionally only the given split(s)."""
    root = Path(root)
    if not root.is_dir():
        raise TaskFormatError(f"task root {root} is not a directory")
    if isinstance(splits, str):
        splits = [splits]
    tasks = [load_task(d) for d in sorted(root.iterdir()) if d.is_dir()]
    if splits is not None:
        tasks = [t for t in tasks if t.split in splits]
    return tasks


def tasks_by_id(tasks: list[Task]) -> dict[str, Task]:
    return {t.id: t for t in tasks}


def write_manifest(tasks: list[Task], path: str | Path, source: str) -> None:
    """Record the resolved task set; downstream jobs load tasks from it."""
    from chorus.io import atomic_write_json

    atomic_write_json(
        path,
        {
            "source": source,
            "tasks": [
                {
                    "id": t.id,
                    "split": t.split,
                    "difficulty": t.difficulty,
                    "source": t.source,
                    "family": t.family,
                    "dir": str(t.root),
                }
                for t in tasks
            ],
        },
    )


def load_manifest(
    path: str | Path, splits: str | list[str] | None = None, root: str | Path = "."
) -> list[Task]:
    """The tasks a manifest lists. Relative task folders (the synthetic corpus's) are
    relative to the workflow folder `root`, which is the current directory in a job."""
    import json

    if isinstance(splits, str):
        splits = [splits]
    entries = json.loads(Path(path).read_text())["tasks"]
    return [
        load_task(Path(root) / e["dir"]) for e in entries if splits is None or e["split"] in splits
    ]
