"""Adapter for the CVDP benchmark's JSONL, coverage category cid012 ("test plan to
testbench stimulus"), in CVDP's own terms (docs/cvdp.md).

A non-agentic cid012 row, as published (example_dataset/
cvdp_v1.1.0_example_nonagentic_code_generation_commercial*.jsonl of NVlabs/cvdp_benchmark):
  {"id": "cvdp_copilot_gf_multiplier_0039", "categories": ["cid012", "easy"],
   "input": {"prompt": <test plan>, "context": {}},                 # black-box: no RTL
   "output": {"response": "", "context": {"verif/gf_multiplier_tb.sv": <solution or "">}},
   "harness": {"files": {"src/.env": "HASH = ...\\nTARGET = 90",
                         "src/gf_multiplier.sv": <design>,
                         "src/coverage.cmd": "report -metrics overall -out coverage.log",
                         "src/process.py": <xrun -coverage all /src/gf_multiplier.sv
                                            /code/verif/gf_multiplier_tb.sv ...; asserts
                                            metrics["uut"]["Average"] >= TARGET>,
                         "docker-compose.yml": ...}}}
The model must answer with the one file `output.context` names (a SystemVerilog
testbench that instantiates the design as `uut`); the row passes when the overall average
coverage of instance `uut` reaches TARGET percent. Each row becomes a task folder
(docs/task_format.md) with answer_language systemverilog, that testbench file and
instance, the design files of the harness's simulation command, coverage_target
{average: TARGET/100} and, when the row has a solution, stimulus/reference.sv.

Agentic rows (top-level `prompt`/`context`/`patch`, the answer a patch made by an agent
in a container) are skipped and counted; rows of other categories are skipped. A
malformed cid012 row raises CvdpFormatError naming the row id (or line) and the field.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import yaml

from chorus.tasks import (
    DIFFICULTIES,
    SPLITS,
    SV_FILE_RE,
    Task,
    TaskFormatError,
    load_task,
    validate_average,
)

log = logging.getLogger(__name__)

COVERAGE_CATEGORY = "cid012"
DEFAULT_DIFFICULTY = "medium"  # rows whose categories name no difficulty
DEFAULT_INSTANCE = "uut"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
_HDL_SUFFIXES = (".sv", ".v", ".svh", ".vh")
_HDL_TOKEN = re.compile(r"[^\s'\"]+\.(?:sv|v)\b")
_INSTANCE_CHECK = re.compile(r"metrics\s*\[\s*[\"'](\w+)[\"']\s*\]\s*\[\s*[\"'](\w+)[\"']\s*\]\s*>=")
_PROMPT_INSTANCE = re.compile(r"`?(\w+)`?\s+module\s+is\s+instantiated\s+as\s+`?(\w+)`?", re.I)
_MODULE = re.compile(r"\bmodule\s+(?:automatic\s+|static\s+)?([A-Za-z_][A-Za-z0-9_$]*)")


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


def is_agentic(row: dict) -> bool:
    """Agentic rows carry prompt/context/patch at the top level, not input/output."""
    return "input" not in row and ("patch" in row or "prompt" in row)


def _strip_comments(code: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", code, flags=re.S)


def design_top(rtl: dict[str, str], prompt: str, where: str) -> str:
    """The design's top module: the module no other design module instantiates; the
    prompt's "`X` module is instantiated as" settles a tie."""
    code = {name: _strip_comments(text) for name, text in rtl.items()}
    modules = [m for text in code.values() for m in _MODULE.findall(text)]
    if not modules:
        raise _row_error(where, "the design files define no module")
    everything = "\n".join(code.values())
    tops = [
        m for m in modules
        if not re.search(rf"^\s*{re.escape(m)}\s*(?:#\s*\(|[A-Za-z_][A-Za-z0-9_$]*\s*[(\[])", everything, re.M)
    ]
    if len(tops) == 1:
        return tops[0]
    named = [m for m, _ in _PROMPT_INSTANCE.findall(prompt) if m in (tops or modules)]
    if len(set(named)) == 1:
        return named[0]
    raise _row_error(where, f"cannot tell the design's top module among {tops or modules}")


def _simulation_files(process: str) -> list[str]:
    """HDL files of the harness's simulation command (`xrun ... /src/x.sv /code/verif/x_tb.sv`)."""
    for line in process.splitlines():
        if "xrun" in line or "vcs" in line or "verilator" in line:
            files = _HDL_TOKEN.findall(line)
            if files:
                return files
    return []


def _container_to_row_path(path: str) -> str:
    """`/src/x.sv` -> `src/x.sv` (harness files), `/code/rtl/x.sv` -> `rtl/x.sv` (contexts)."""
    if path.startswith("/code/"):
        return path[len("/code/") :]
    return path.lstrip("/").removeprefix("./")


def _check_target(target: float | None) -> float | None:
    if target is None:
        return None
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 <= target <= 1:
        raise TaskFormatError(f"CVDP target must be a fraction in [0, 1] or null (each row's TARGET), got {target!r}")
    return float(target)


def _answer(row: dict, where: str) -> tuple[str, str]:
    """The row's one testbench file: its path and the reference solution."""
    answers = _require(row, "output.context", dict, where)
    if len(answers) != 1:
        raise _row_error(where, f"field 'output.context' must name exactly one testbench file, got {sorted(answers)}")
    (answer_file, solution), = answers.items()
    if not isinstance(answer_file, str) or not SV_FILE_RE.match(answer_file) or ".." in answer_file.split("/"):
        raise _row_error(where, f"output.context: {answer_file!r} is not a SystemVerilog file path")
    if not isinstance(solution, str):
        raise _row_error(where, f"field 'output.context[{answer_file!r}]' must be a string")
    return answer_file, solution


def _harness_env(files: dict, where: str) -> tuple[dict, float]:
    """The harness's .env settings and its coverage TARGET (a percentage)."""
    env_files = [path for path in files if path.rsplit("/", 1)[-1] == ".env"]
    if not env_files:
        raise _row_error(where, "field 'harness.files' has no .env file")
    env_path = "src/.env" if "src/.env" in env_files else env_files[0]
    if not isinstance(files[env_path], str):
        raise _row_error(where, f"field 'harness.files[{env_path!r}]' must be a string")
    env = parse_env(files[env_path])
    try:
        row_target = float(env.get("TARGET", ""))
    except ValueError:
        raise _row_error(where, f"harness.files[{env_path!r}] lacks TARGET (a coverage percentage)") from None
    if not 0 <= row_target <= 100:
        raise _row_error(where, f"harness.files[{env_path!r}]: TARGET {row_target} is not a percentage")
    return env, row_target


def _instance(process: str, env: dict, prompt: str, where: str) -> str:
    """The design instance whose coverage is graded: from src/process.py's check, the
    .env's INST, the prompt, else DEFAULT_INSTANCE."""
    instance = DEFAULT_INSTANCE
    checks = _INSTANCE_CHECK.findall(process)
    if checks:
        instance, column = checks[0]
        if column != "Average":
            raise _row_error(
                where, f"src/process.py grades metrics[{instance!r}][{column!r}]; only 'Average' is supported"
            )
    elif env.get("INST"):
        instance = env["INST"]
    elif found := _PROMPT_INSTANCE.findall(prompt):
        instance = found[0][1]
    if not _IDENT.match(instance):
        raise _row_error(where, f"instance name {instance!r} is not an identifier")
    return instance


def _design_files(files: dict, context: dict, process: str, answer_file: str, where: str) -> dict[str, str]:
    """The design's files by name: those src/process.py simulates besides the answer, else
    the harness's own HDL files."""
    available = {p: c for p, c in {**context, **files}.items() if isinstance(c, str)}
    simulated = _simulation_files(process)
    if simulated:
        sources = []
        for path in simulated:
            rel = _container_to_row_path(path)
            if rel == answer_file:
                continue
            if rel not in available:
                raise _row_error(where, f"src/process.py simulates {path!r}, which is not in the row's files")
            sources.append(rel)
        if not any(_container_to_row_path(p) == answer_file for p in simulated):
            raise _row_error(where, f"src/process.py does not simulate the answer file {answer_file!r}")
    else:  # no simulation command: the harness's own HDL files
        sources = sorted(p for p in files if p.startswith("src/") and p.endswith((".sv", ".v")))
    if not sources:
        raise _row_error(where, "no design files (src/*.sv in harness.files, or the files of src/process.py)")
    rtl: dict[str, str] = {}
    for rel in sources:
        name = rel.rsplit("/", 1)[-1]
        if name in rtl and rtl[name] != available[rel]:
            raise _row_error(where, f"two design files are named {name!r}")
        rtl[name] = available[rel]
    return rtl


def convert_row(
    row: object,
    out_dir: Path,
    split: str,
    where: str = "?",
    *,
    target: float | None = None,
    average_of: dict[str, list[str]] | None = None,
    white_box: bool = False,
) -> Path | str | None:
    """Write one row's task folder and return it; "agentic" for a skipped agentic cid012
    row; None for rows outside the coverage category."""
    if not isinstance(row, dict):
        raise _row_error(where, "a row must be a JSON object")
    if isinstance(row.get("id"), str) and row["id"]:
        where = repr(row["id"])
    categories = _require(row, "categories", list, where)
    if COVERAGE_CATEGORY not in categories:
        return None
    if is_agentic(row):
        return "agentic"
    cvdp_id = _require(row, "id", str, where)
    if not task_id_for(cvdp_id):
        raise _row_error(where, "field 'id' has no usable characters")
    prompt = _require(row, "input.prompt", str, where)
    if not prompt.strip():
        raise _row_error(where, "field 'input.prompt' is empty")
    context = row["input"].get("context", {})
    if not isinstance(context, dict) or not all(isinstance(v, str) for v in context.values()):
        raise _row_error(where, "field 'input.context' must be an object of path -> code")
    answer_file, solution = _answer(row, where)
    files = _require(row, "harness.files", dict, where)
    env, row_target = _harness_env(files, where)
    process = files.get("src/process.py") if isinstance(files.get("src/process.py"), str) else ""
    instance = _instance(process, env, prompt, where)
    rtl = _design_files(files, context, process, answer_file, where)
    toplevel = env.get("TOPLEVEL") or design_top(rtl, prompt, where)
    if not _IDENT.match(toplevel):
        raise _row_error(where, f"top module {toplevel!r} is not a module name")

    difficulty = next((c for c in categories if c in DIFFICULTIES), DEFAULT_DIFFICULTY)
    task_id = task_id_for(cvdp_id)
    folder = out_dir / task_id
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "rtl").mkdir(parents=True)
    for name, code in rtl.items():
        (folder / "rtl" / name).write_text(code)
    if solution.strip():
        (folder / "stimulus").mkdir()
        (folder / "stimulus" / "reference.sv").write_text(solution)
    meta = {
        "id": task_id,
        "title": f"CVDP {cvdp_id}",
        "difficulty": difficulty,
        "split": split,
        "toplevel": toplevel,
        "rtl": [f"rtl/{name}" for name in rtl],
        "coverage_target": {"average": row_target / 100 if target is None else target},
        "tags": ["cvdp", COVERAGE_CATEGORY],
        "answer_language": "systemverilog",
        "testbench": {"file": answer_file, "instance": instance},
        "show_rtl": bool(white_box),
    }
    if average_of is not None:
        meta["coverage_average"] = {k: list(v) for k, v in average_of.items()}
    (folder / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    (folder / "spec.md").write_text(cvdp_spec(prompt, context))
    return folder


def cvdp_spec(prompt: str, context: dict[str, str]) -> str:
    """The row's prompt as CVDP gives it to a model: each context file, then the request."""
    parts = [
        f"Consider the following content for the file {path}:\n```\n{code}\n```\n" for path, code in context.items()
    ]
    text = "\n".join(parts) + prompt
    return text if text.endswith("\n") else text + "\n"


def convert_cvdp_jsonl(
    jsonl_path: str | Path,
    out_dir: str | Path,
    target: float | None = None,
    split: str = "test",
    *,
    average_of: dict[str, list[str]] | None = None,
    white_box: bool = False,
) -> list[Task]:
    """Convert every non-agentic cid012 row of a CVDP JSONL file into task folders under
    `out_dir` and return the loaded tasks (in file order).

    `target`: None grades each row against its own TARGET; a fraction overrides it for
    every row. `average_of`: the groups of the overall average (default
    chorus.tasks.DEFAULT_AVERAGE_OF). `white_box`: show the RTL in the prompt. Other
    categories and agentic rows are skipped; a malformed cid012 row, a repeated id or a
    file without non-agentic cid012 rows raises CvdpFormatError."""
    jsonl_path = Path(jsonl_path)
    if not jsonl_path.is_file():
        raise CvdpFormatError(f"CVDP file {jsonl_path} does not exist")
    if split not in SPLITS:
        raise TaskFormatError(f"CVDP split must be one of {SPLITS}, got {split!r}")
    target = _check_target(target)
    validate_average(average_of, "CVDP conversion")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    agentic = 0
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
            folder = convert_row(row, out_dir, split, where, target=target, average_of=average_of,
                                 white_box=white_box)
            if folder == "agentic":
                agentic += 1
                continue
            if folder is None:
                continue
            seen[folder.name] = row["id"]
            tasks.append(load_task(folder))
    if agentic:
        log.warning("%s: skipped %d agentic %s row(s) (only non-agentic rows are converted)",
                    jsonl_path, agentic, COVERAGE_CATEGORY)
    if not tasks:
        hint = " (its cid012 rows are agentic: use a *nonagentic_code_generation* file)" if agentic else ""
        raise CvdpFormatError(f"{jsonl_path}: no non-agentic {COVERAGE_CATEGORY} rows{hint}")
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
