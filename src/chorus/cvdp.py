"""Adapter for the CVDP benchmark's JSONL (non-agentic rows), coverage category cid012.

A row looks like
  {"id": "cvdp_copilot_<name>_0001", "categories": ["cid012", "hard"],
   "input": {"prompt": ..., "context": {path: code}},
   "output": {"response": ..., "context": {path: code}},
   "harness": {"files": {"src/.env": "TOPLEVEL=...\\nVERILOG_SOURCES=...", ...}}}
Each cid012 row becomes a task folder (docs/task_format.md) that chorus.tasks loads:
RTL from the files VERILOG_SOURCES names (looked up in the row's contexts and harness
files), the prompt as spec, TOPLEVEL as top level. CVDP grades cid012 with a commercial
simulator's coverage, which we do not have, so every converted task gets the same
configured Verilator coverage target (docs/cvdp.md). Rows of other categories are skipped.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import yaml

from chorus.tasks import Task, TaskFormatError, load_task

COVERAGE_CATEGORY = "cid012"
DIFFICULTIES = ("easy", "medium", "hard")


class CvdpFormatError(TaskFormatError):
    """A CVDP row lacks a field the adapter needs."""


def _require(row: dict, path: str):
    value = row
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise CvdpFormatError(f"CVDP row {row.get('id', '<no id>')!r}: missing field {path!r}")
        value = value[key]
    return value


def parse_env(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip().strip('"').strip("'")
    return env


def _task_id(cvdp_id: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", cvdp_id.lower()).strip("_")


def convert_row(row: dict, out_dir: Path, default_target: dict[str, float], split: str) -> Path | None:
    """Write one row's task folder; None for rows outside the coverage category."""
    categories = _require(row, "categories")
    if COVERAGE_CATEGORY not in categories:
        return None
    cvdp_id = _require(row, "id")
    prompt = _require(row, "input.prompt")
    files = _require(row, "harness.files")
    env_text = next((text for path, text in files.items() if path.endswith(".env")), None)
    if env_text is None:
        raise CvdpFormatError(f"CVDP row {cvdp_id!r}: harness.files has no .env file")
    env = parse_env(env_text)
    if "TOPLEVEL" not in env or "VERILOG_SOURCES" not in env:
        raise CvdpFormatError(f"CVDP row {cvdp_id!r}: .env lacks TOPLEVEL or VERILOG_SOURCES")
    available = {
        **row.get("input", {}).get("context", {}),
        **row.get("output", {}).get("context", {}),
        **files,
    }
    task_id = _task_id(cvdp_id)
    folder = out_dir / task_id
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "rtl").mkdir(parents=True)
    rtl = []
    for source in env["VERILOG_SOURCES"].split():
        # the harness names files as paths inside its container (/code/rtl/x.sv)
        name = source.rsplit("/", 1)[-1]
        match = next((text for path, text in available.items() if path.rsplit("/", 1)[-1] == name), None)
        if match is None:
            raise CvdpFormatError(f"CVDP row {cvdp_id!r}: source {source!r} is not in the row's files")
        (folder / "rtl" / name).write_text(match)
        rtl.append(f"rtl/{name}")
    difficulty = next((c for c in categories if c in DIFFICULTIES), "medium")
    meta = {
        "id": task_id,
        "title": f"CVDP {cvdp_id}",
        "difficulty": difficulty,
        "split": split,
        "toplevel": env["TOPLEVEL"],
        "rtl": rtl,
        "coverage_target": dict(default_target),
        "tags": ["cvdp", COVERAGE_CATEGORY],
    }
    (folder / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    (folder / "spec.md").write_text(prompt)
    return folder


def convert_cvdp_jsonl(
    jsonl_path: str | Path,
    out_dir: str | Path,
    default_target: dict[str, float] | None = None,
    split: str = "test",
) -> list[Task]:
    """Convert every cid012 row of a CVDP JSONL file into task folders under `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = default_target or {"line": 0.9, "branch": 0.9}
    tasks = []
    for number, line in enumerate(Path(jsonl_path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise CvdpFormatError(f"{jsonl_path}:{number}: not JSON: {err}") from err
        folder = convert_row(row, out_dir, target, split)
        if folder is not None:
            tasks.append(load_task(folder))
    if not tasks:
        raise CvdpFormatError(f"{jsonl_path}: no {COVERAGE_CATEGORY} rows")
    return tasks
