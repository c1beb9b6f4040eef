"""Start a cocotb candidate in the sandbox and read what it left: the simulator command
(the environment cocotb's runner would give the prebuilt Verilator binary), cocotb's
results file and the coverage database. The confinement itself is sandbox.py's."""

from __future__ import annotations

import ast
import functools
import importlib.util
import marshal
import os
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from chorus.harness.outputs import (
    COVERAGE_NAME,
    OUT_DIR,
    RESULTS_MAX_BYTES,
    RESULTS_NAME,
    TRACE_NAME,
    OversizedOutput,
)
from chorus.harness.replay import TRACE_MAX_BYTES
from chorus.harness.sandbox import (
    GUARD_DIR,
    SandboxLimits,
    _read_output,
    blocked_for_others,
    child_env,
    confined_workdir,
    run_confined,
    simulator_site_folders,
)

STIMULUS_MODULE = "stimulus"


@dataclass
class SandboxResult:
    returncode: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    output_limited: bool
    tests: int | None = None  # None: no results file (the simulation never finished)
    failures: int = 0
    failure_messages: list[str] = field(default_factory=list)
    trace: bytes | None = None  # the recorded inputs (None: not written)
    trace_oversized: bool = False
    # Run 1's own coverage.dat: only with direct_coverage=True (tests of the replay)
    direct_coverage: str | None = None
    confinement: dict = field(default_factory=dict)


@functools.cache
def _cocotb_embedding() -> dict[str, str]:
    """How the simulator finds cocotb and this Python (what cocotb's runner sets in
    `_set_env_common`): the libpython and cocotb's GPI entry point to load, the
    interpreter whose environment the embedded Python takes, cocotb's libraries."""
    import cocotb_tools.config
    import find_libpython

    libpython = find_libpython.find_libpython()
    if libpython is None:
        raise RuntimeError("cocotb cannot find libpython for this interpreter")
    return {
        "GPI_USERS": ";".join([libpython, cocotb_tools.config.pygpi_entry_point()]),
        "PYGPI_PYTHON_BIN": sys.executable,
        "libs_dir": str(cocotb_tools.config.libs_dir),
    }


def simulator_command(
    workdir: Path, build_dir: Path, toplevel: str, seed: int, guard: bool, out_dir: Path | None = None,
    direct_coverage: bool = False,
):
    """(argv, env) that run the cocotb test module `stimulus` in `workdir` against the
    Verilator build, as `cocotb_tools.runner.Verilator.test` would: the build's binary
    (the chorus driver in record mode), cocotb's documented environment variables. The
    results file and the input trace go to absolute paths in `out_dir` (default
    `workdir`), so changing directory does not move them; `direct_coverage`: the run
    writes its own coverage too (tests compare it with the replay's)."""
    out_dir = Path(out_dir or workdir).absolute()
    embedding = _cocotb_embedding()
    env = child_env(workdir)
    # The simulator's Python imports the stimulus from the workdir, cocotb from where it
    # is installed, nothing of the scorer's sys.path (the repository, chorus); the guard's
    # sitecustomize comes first and is switched on for that Python only.
    python_path = [str(GUARD_DIR)] if guard else []
    python_path += [str(workdir), *simulator_site_folders()]
    env.update({
        "PATH": env["PATH"] + os.pathsep + embedding["libs_dir"],
        "PYTHONPATH": os.pathsep.join(python_path),
        "GPI_USERS": embedding["GPI_USERS"],
        "PYGPI_PYTHON_BIN": embedding["PYGPI_PYTHON_BIN"],
        "COCOTB_TOPLEVEL": toplevel,
        "COCOTB_TEST_MODULES": STIMULUS_MODULE,
        "TOPLEVEL_LANG": "verilog",
        "COCOTB_TRUST_INERTIAL_WRITES": "1",  # the runner's default for Verilator
        "COCOTB_RANDOM_SEED": str(seed),
        "COCOTB_RESULTS_FILE": str(out_dir / RESULTS_NAME),
        "COCOTB_RESULTS_ATTACHMENTS": "",
        # the stimulus comes with its asserts already rewritten (stimulus_bytecode): no
        # pytest configuration, plugin scan or import hook to set up in every candidate
        "COCOTB_REWRITE_ASSERTION_FILES": "",
    })
    if guard:
        env["CHORUS_GUARD"] = "1"
    # cocotb's Verilator main writes coverage through Verilated's context, which takes
    # its file name from this plusarg (default: coverage.dat in the cwd)
    command = [str(Path(build_dir) / toplevel), "--chorus-record", str(out_dir / TRACE_NAME),
               "--chorus-record-limit", str(TRACE_MAX_BYTES)]
    if direct_coverage:
        command += ["--chorus-coverage", f"+verilator+coverage+file+{out_dir / COVERAGE_NAME}"]
    return command, env


def stimulus_bytecode(source: bytes, path: Path) -> bytes | None:
    """The .pyc the simulator's Python loads for the stimulus at `path`: its code with the
    asserts rewritten as pytest rewrites a test module's (a failed `assert a == b` says
    what a and b were), as cocotb's import hook would do inside every candidate's run.
    A hash-checked pyc (PEP 552): used only with exactly this source beside it. None
    when the rewrite fails (the stimulus is then compiled as it is, plain asserts)."""
    try:
        from _pytest.assertion.rewrite import rewrite_asserts

        tree = ast.parse(source, filename=str(path))
        rewrite_asserts(tree, source, str(path))
        code = compile(tree, str(path), "exec", dont_inherit=True, optimize=0)  # asserts kept, even under -O
        body = marshal.dumps(code)
    except Exception:  # noqa: BLE001  (any failure, pytest's API too: the sandbox compiles the source)
        return None
    checked_hash_flags = (0b11).to_bytes(4, "little")
    return importlib.util.MAGIC_NUMBER + checked_hash_flags + importlib.util.source_hash(source) + body


def write_stimulus(home: Path, stimulus_text: str) -> None:
    """The stimulus module in the candidate's `home`, with its .pyc (stimulus_bytecode)
    where the simulator's Python looks for it."""
    stimulus, source = home / f"{STIMULUS_MODULE}.py", stimulus_text.encode()
    stimulus.write_bytes(source)
    if (bytecode := stimulus_bytecode(source, stimulus)) is not None:
        cached = Path(importlib.util.cache_from_source(str(stimulus), optimization=""))
        cached.parent.mkdir()
        cached.write_bytes(bytecode)


def parse_results(data: bytes | None) -> tuple[int | None, int, list[str]]:
    """(tests, failures, messages) of a cocotb results file; tests None when there is
    none or it is not one. A DOCTYPE is refused (no entity expansion)."""
    if not data or b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        return None, 0, []
    try:
        root = ElementTree.fromstring(data)
    except ElementTree.ParseError:
        return None, 0, []
    tests = failures = 0
    messages = []
    try:
        for suite in root.iter("testsuite"):
            tests += int(suite.get("tests", 0))
            failures += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    except ValueError:
        return None, 0, []
    for case in root.iter("testcase"):
        for problem in list(case.findall("failure")) + list(case.findall("error")):
            messages.append(
                f"{case.get('name')}: {problem.get('message') or (problem.text or '').strip()}"[:500]
            )
    if failures == 0:
        failures = len(messages)
    return tests, failures, messages


def run_candidate(
    stimulus_text: str,
    build_dir: Path,
    toplevel: str,
    limits: SandboxLimits = SandboxLimits(),
    seed: int = 0,
    direct_coverage: bool = False,
) -> SandboxResult:
    """Run 1: simulate `stimulus_text` (a cocotb test module) against the build in
    `build_dir`, sandboxed, and keep what it left: the input trace (to replay) and the
    candidate's own test report (a claim). `direct_coverage`: also count the points of
    keep the coverage.dat this run writes itself (tests of the replay only)."""
    writes = (RESULTS_NAME, TRACE_NAME, *((COVERAGE_NAME,) if direct_coverage else ()))
    with confined_workdir(limits) as folder:
        # in the candidate's own root every folder on the way is the sandbox's: only
        # without namespaces must the sandbox uid be able to traverse the host's folders
        if (folder.uid is not None and not folder.namespaced
                and (blocked := blocked_for_others(Path(build_dir).resolve()))):
            raise PermissionError(
                f"the sandbox user cannot reach the build {build_dir}: {blocked} is not "
                "world-traversable (keep the Verilator cache in a readable place, CHORUS_CACHE_DIR)"
            )
        write_stimulus(folder.home, stimulus_text)
        with folder.outputs(OUT_DIR, writes) as outputs:  # outputs.out holds what is kept
            command, sim_env = simulator_command(
                folder.home, build_dir, toplevel, seed, limits.guard, outputs.out, direct_coverage
            )
            visible = [build_dir, *([GUARD_DIR] if limits.guard else [])]
            run = run_confined(command, sim_env, folder, outputs, limits, read_only=visible)
            tests, failures, messages = parse_results(_read_output(outputs, RESULTS_NAME, RESULTS_MAX_BYTES))
            trace, oversized = None, False
            try:
                if not outputs.tampered(TRACE_NAME):
                    # the driver stops recording past TRACE_MAX_BYTES ("overflow")
                    trace = outputs.read(TRACE_NAME, min(TRACE_MAX_BYTES + (1 << 20), limits.fsize_mb << 20))
            except OversizedOutput:
                oversized = True
            dat = _read_output(outputs, COVERAGE_NAME, limits.fsize_mb << 20) if direct_coverage else None
        return SandboxResult(
            returncode=run.returncode,
            timed_out=run.timed_out,
            wall_s=run.wall_s,
            log_tail=run.log_tail,
            output_limited=run.output_limited,
            tests=tests,
            failures=failures,
            failure_messages=messages,
            trace=trace,
            trace_oversized=oversized,
            direct_coverage=dat.decode(errors="replace") if dat else None,
            confinement=run.confinement,
        )
