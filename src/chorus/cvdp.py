"""Adapter for the CVDP benchmark's JSONL (non-agentic rows), coverage category cid012.

A row looks like
  {"id": "cvdp_copilot_<name>_0001", "categories": ["cid012", "hard"],
   "input": {"prompt": ..., "context": {path: code}},
   "output": {"response": ..., "context": {path: code}},
   "harness": {"files": {"src/.env": "TOPLEVEL=...\\nVERILOG_SOURCES=...", ...}}}
Each cid012 row becomes a task folder (docs/task_format.md) that chorus.tasks loads:
RTL from the files VERILOG_SOURCES names (looked up in the row's contexts and harness
files), the prompt as spec, TOPLEVEL as top level, the difficulty from the categories.
CVDP grades cid012 with a commercial simulator's coverage, which we do not have, so every
converted task gets the same configured Verilator coverage target (docs/cvdp.md). Rows of
other categories are skipped; a malformed cid012 row raises CvdpFormatError naming the
row id (or line number) and the field.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

from chorus.tasks import DIFFICULTIES, METRICS, SPLITS, Task, TaskFormatError, load_task

COVERAGE_CATEGORY = "cid012"
DEFAULT_TARGET = {"line": 0.9, "branch": 0.9}
DEFAULT_DIFFICULTY = "medium"  # rows whose categories name no difficulty
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
_HDL_SUFFIXES = (".sv", ".v", ".svh", ".vh")
# where the CVDP harness mounts the row's files inside its container
_CONTAINER_PREFIXES = ("/code/", "/src/", "./", "/")


class CvdpFormatError(TaskFormatError):
    """A CVDP row lacks a field the adapter needs, or the field has the wrong shape."""


def _row_error(where: str, message: str) -> CvdpFormatError:
    return CvdpFormatError(f"CVDP row {where}: {message}")


def _require(row: dict, path: str, kind: type | tuple[type, ...], where: str):
    """The value at dotted `path`, checked to be of `kind`."""
    value = row
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise _row_error(where, f"missing field {path!r}")
        value = value[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise _row_error(where, f"field {path!r} must be a {names}, got {type(value).__name__}")
    return value


def parse_env(text: str) -> dict[str, str]:
    """KEY=value lines of a harness .env (spaces around '=' and quotes allowed)."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("export "):
            line = line[len("export ") :]
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip().strip('"').strip("'")
    return env


def task_id_for(cvdp_id: str) -> str:
    """A task id ([a-z0-9_]+) for a CVDP row id."""
    return re.sub(r"[^a-z0-9_]+", "_", cvdp_id.lower()).strip("_")


def _strip_container_prefix(path: str) -> str:
    for prefix in _CONTAINER_PREFIXES:
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _find_source(source: str, available: dict[str, str], where: str) -> tuple[str, str]:
    """(file name, code) of one VERILOG_SOURCES entry: an exact relative path first
    (`/code/rtl/x.sv` -> `rtl/x.sv`), else a unique file of that name."""
    rel = _strip_container_prefix(source)
    for path, text in available.items():
        if _strip_container_prefix(path) == rel:
            return rel.rsplit("/", 1)[-1], text
    name = rel.rsplit("/", 1)[-1]
    matches = [text for path, text in available.items() if path.rsplit("/", 1)[-1] == name]
    if not matches:
        raise _row_error(where, f"harness.files .env: VERILOG_SOURCES file {source!r} is not in the row's files")
    if len({*matches}) > 1:
        raise _row_error(where, f"harness.files .env: VERILOG_SOURCES file {source!r} is ambiguous")
    return name, matches[0]


def convert_row(
    row: object, out_dir: Path, default_target: dict[str, float], split: str, where: str = "?"
) -> Path | None:
    """Write one row's task folder; None for rows outside the coverage category."""
    if not isinstance(row, dict):
        raise _row_error(where, "a row must be a JSON object")
    if isinstance(row.get("id"), str) and row["id"]:
        where = repr(row["id"])
    categories = _require(row, "categories", list, where)
    if COVERAGE_CATEGORY not in categories:
        return None
    cvdp_id = _require(row, "id", str, where)
    if not task_id_for(cvdp_id):
        raise _row_error(where, "field 'id' has no usable characters")
    prompt = _require(row, "input.prompt", str, where)
    if not prompt.strip():
        raise _row_error(where, "field 'input.prompt' is empty")
    files = _require(row, "harness.files", dict, where)
    env_files = [path for path in files if path.rsplit("/", 1)[-1] == ".env"]
    if not env_files:
        raise _row_error(where, "field 'harness.files' has no .env file")
    env_path = "src/.env" if "src/.env" in env_files else env_files[0]
    if not isinstance(files[env_path], str):
        raise _row_error(where, f"field 'harness.files[{env_path!r}]' must be a string")
    env = parse_env(files[env_path])
    for key in ("TOPLEVEL", "VERILOG_SOURCES"):
        if not env.get(key):
            raise _row_error(where, f"harness.files[{env_path!r}] lacks {key}")
    toplevel = env["TOPLEVEL"]
    if not _IDENT.match(toplevel):
        raise _row_error(where, f"harness.files[{env_path!r}]: TOPLEVEL {toplevel!r} is not a module name")

    available: dict[str, str] = {}
    for section in ("input.context", "output.context"):
        head, key = section.split(".")
        context = row.get(head, {}).get(key, {}) if isinstance(row.get(head), dict) else {}
        if not isinstance(context, dict):
            raise _row_error(where, f"field {section!r} must be an object of path -> code")
        available.update({p: c for p, c in context.items() if isinstance(c, str)})
    available.update({p: c for p, c in files.items() if isinstance(c, str)})

    sources = env["VERILOG_SOURCES"].split()
    rtl: dict[str, str] = {}
    for source in sources:
        if not source.endswith(_HDL_SUFFIXES):
            raise _row_error(where, f"harness.files .env: VERILOG_SOURCES entry {source!r} is not a Verilog file")
        name, code = _find_source(source, available, where)
        if name in rtl and rtl[name] != code:
            raise _row_error(where, f"harness.files .env: two VERILOG_SOURCES files are named {name!r}")
        rtl[name] = code

    difficulty = next((c for c in categories if c in DIFFICULTIES), DEFAULT_DIFFICULTY)
    task_id = task_id_for(cvdp_id)
    folder = out_dir / task_id
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "rtl").mkdir(parents=True)
    for name, code in rtl.items():
        (folder / "rtl" / name).write_text(code)
    meta = {
        "id": task_id,
        "title": f"CVDP {cvdp_id}",
        "difficulty": difficulty,
        "split": split,
        "toplevel": toplevel,
        "rtl": [f"rtl/{name}" for name in rtl],
        "coverage_target": dict(default_target),
        "tags": ["cvdp", COVERAGE_CATEGORY],
    }
    (folder / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    (folder / "spec.md").write_text(prompt if prompt.endswith("\n") else prompt + "\n")
    return folder


def _check_target(target: dict[str, float]) -> dict[str, float]:
    if not isinstance(target, dict) or not target:
        raise TaskFormatError("CVDP default_target must be a non-empty mapping metric -> fraction")
    for metric, value in target.items():
        if metric not in METRICS:
            raise TaskFormatError(f"CVDP default_target: unknown metric {metric!r} (one of {METRICS})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise TaskFormatError(f"CVDP default_target.{metric} must be a number in [0, 1]")
    return {m: float(v) for m, v in target.items()}


def convert_cvdp_jsonl(
    jsonl_path: str | Path,
    out_dir: str | Path,
    default_target: dict[str, float] | None = None,
    split: str = "test",
) -> list[Task]:
    """Convert every cid012 row of a CVDP JSONL file into task folders under `out_dir`
    and return the loaded tasks (in file order). Other categories are skipped; a
    malformed cid012 row, a repeated id or a file without cid012 rows raises
    CvdpFormatError."""
    jsonl_path = Path(jsonl_path)
    if not jsonl_path.is_file():
        raise CvdpFormatError(f"CVDP file {jsonl_path} does not exist")
    if split not in SPLITS:
        raise TaskFormatError(f"CVDP split must be one of {SPLITS}, got {split!r}")
    target = _check_target(DEFAULT_TARGET if default_target is None else default_target)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    with jsonl_path.open() as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"at {jsonl_path.name}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise _row_error(where, f"not valid JSON: {err}") from err
            if isinstance(row, dict) and isinstance(row.get("id"), str):
                task_id = task_id_for(row["id"])
                if task_id in seen and COVERAGE_CATEGORY in (row.get("categories") or []):
                    raise _row_error(repr(row["id"]), f"task id {task_id!r} repeats row {seen[task_id]!r}")
            folder = convert_row(row, out_dir, target, split, where)
            if folder is None:
                continue
            seen[folder.name] = row["id"]
            tasks.append(load_task(folder))
    if not tasks:
        raise CvdpFormatError(f"{jsonl_path}: no {COVERAGE_CATEGORY} rows")
    _remove_stale(out_dir, set(seen))
    return tasks


def _remove_stale(out_dir: Path, keep: set[str]) -> None:
    """Drop converted task folders of an earlier run whose rows are gone, so that
    load_tasks(out_dir) sees exactly this conversion (only folders tagged cvdp)."""
    for folder in out_dir.iterdir():
        meta_path = folder / "task.yaml"
        if folder.name in keep or not meta_path.is_file():
            continue
        try:
            meta = yaml.safe_load(meta_path.read_text())
        except yaml.YAMLError:
            continue
        if isinstance(meta, dict) and "cvdp" in (meta.get("tags") or []):
            shutil.rmtree(folder)
