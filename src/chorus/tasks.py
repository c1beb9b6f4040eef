"""ECov task format: loading, validation and splits (see docs/task_format.md)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

METRICS = ("line", "branch", "toggle", "expr", "user")
DIFFICULTIES = ("easy", "medium", "hard")
SPLITS = ("train", "val", "test")
SOURCES = ("shipped", "synthetic")  # hand-written benchmark tasks | made by chorus.synth
TASK_ID_RE = re.compile(r"^[a-z0-9_]+$")
_REQUIRED = {"id", "title", "difficulty", "split", "toplevel", "rtl", "coverage_target"}
_OPTIONAL = {"tags", "family", "source", "variants"}

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
        needs_user = "user" in self.coverage_target
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
        if metric not in METRICS:
            raise _fail(where, f"coverage_target: unknown metric {metric!r} (one of {METRICS})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise _fail(where, f"coverage_target.{metric} must be a number in [0, 1]")
    tags = meta.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _fail(where, "field 'tags' must be a list of strings")
    if "family" in meta and (not isinstance(meta["family"], str) or not TASK_ID_RE.match(meta["family"])):
        raise _fail(where, f"field 'family' must match {TASK_ID_RE.pattern}")
    if meta.get("source", "shipped") not in SOURCES:
        raise _fail(where, f"field 'source' must be one of {SOURCES}")
    variants = meta.get("variants", [])
    if not isinstance(variants, list) or not all(isinstance(v, str) for v in variants):
        raise _fail(where, "field 'variants' must be a list of stimulus file paths")
    return meta


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

    return Task(
        id=meta["id"],
        title=meta["title"],
        difficulty=meta["difficulty"],
        split=meta["split"],
        toplevel=meta["toplevel"],
        rtl_files=rtl_files,
        spec=spec_path.read_text(),
        coverage_target={k: float(v) for k, v in meta["coverage_target"].items()},
        reference_stimulus=optional("stimulus/reference.py"),
        trivial_stimulus=optional("stimulus/trivial.py"),
        root=folder,
        tags=tuple(meta.get("tags", [])),
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


def load_manifest(path: str | Path, splits: str | list[str] | None = None) -> list[Task]:
    import json

    if isinstance(splits, str):
        splits = [splits]
    entries = json.loads(Path(path).read_text())["tasks"]
    return [load_task(e["dir"]) for e in entries if splits is None or e["split"] in splits]
