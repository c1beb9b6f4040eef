"""Run one untrusted cocotb stimulus against a prebuilt simulator, confined.

Each candidate runs in its own child process (`harness/_child.py`, standard library
only) that, before any candidate code runs:
- starts a new session (so the whole process tree can be killed),
- enters a fresh network namespace with no interfaces up (no network at all),
- sets rlimits: address space, CPU seconds, open files, processes, file size (caps the
  log: a candidate printing gigabytes is stopped), no core dumps,
- when started as root, drops to an unprivileged uid of its own (one per concurrent
  slot) with no supplementary groups: the candidate cannot read root's files (~/.ssh),
  write outside its temp dir and world-writable places, or signal the scorer, and the
  process limit really applies (root ignores RLIMIT_NPROC).
The child then starts the prebuilt simulator binary itself, with the environment
variables by which cocotb's runner would start it (`simulator_command`): cocotb and its
runner are imported once in the scorer, not once per candidate. The child runs in an
empty temp dir (removed afterwards) with an environment stripped to an allow-list. The parent enforces a wall-clock timeout and, when it ends, kills every
process left in the session and every process of the sandbox uid.

Without root, namespaces and the uid drop are skipped (rlimits, timeout, temp dir and
stripped environment still apply): see docs/harness.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

from chorus.harness.build import load_points_manifest
from chorus.harness.coverage import read_coverage_dat
from chorus.harness.toolchain import setup_verilator_env

SANDBOX_UID_BASE = 61000
SLOT_COUNT = 512
SLOT_DIR = Path(tempfile.gettempdir()) / "chorus-sandbox-slots"
STIMULUS_MODULE = "stimulus"
LOG_NAME = "sim.log"
RESULTS_NAME = "results.xml"
CHILD_SCRIPT = Path(__file__).resolve().parent / "_child.py"
GUARD_DIR = Path(__file__).resolve().parent / "guard"


@dataclass(frozen=True)
class SandboxLimits:
    timeout_s: float = 60.0
    mem_mb: int = 2048  # address space of every process in the sandbox
    cpu_s: int | None = None  # default: timeout_s + 5
    nproc: int = 64
    fsize_mb: int = 64  # largest file the candidate may write (its log included)
    nofile: int = 256
    isolate_network: bool = True
    drop_privileges: bool = True
    guard: bool = True  # audit-hook guard inside the simulator's Python (guard/)


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
    coverage: dict[str, tuple[int, int]] | None = None
    confinement: dict = field(default_factory=dict)


# -- uid slots ---------------------------------------------------------------------------
@contextlib.contextmanager
def _sandbox_slot():
    """A slot number no other live candidate on this host holds (flock'd file)."""
    SLOT_DIR.mkdir(mode=0o700, exist_ok=True)
    start = os.getpid() % SLOT_COUNT
    while True:
        for offset in range(SLOT_COUNT):
            slot = (start + offset) % SLOT_COUNT
            handle = open(SLOT_DIR / f"{slot}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield slot
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        time.sleep(0.05)


def _workdir_parent(as_root: bool) -> str:
    """Candidates' folders: as root, outside the shared temp folders that the child
    covers with private tmpfs mounts (node-local /run); otherwise the usual temp dir."""
    if not as_root:
        return tempfile.gettempdir()
    parent = Path(os.environ.get("CHORUS_SANDBOX_DIR", "/run/chorus-sandbox"))
    parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    return str(parent)


def processes_of_uid(uid: int) -> list[int]:
    """Live (non-zombie) processes owned by `uid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if state != "Z":
            pids.append(int(entry))
    return pids


def _kill_everything(proc: subprocess.Popen, uid: int | None, deadline_s: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    if uid is None:
        return
    # A candidate may fork, setsid and leave the session, or fork faster than we kill
    # pid by pid: kill(-1) sent as the sandbox uid reaches all of its processes in one
    # pass that new forks cannot slip past. Repeat until the uid owns nothing, so the
    # next candidate in this slot starts with its whole process budget.
    end = time.monotonic() + deadline_s
    while processes_of_uid(uid) and time.monotonic() < end:
        subprocess.run(
            ["kill", "-KILL", "-1"], user=uid, group=uid, extra_groups=[],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
        )
        time.sleep(0.02)


def blocked_for_others(path: Path) -> Path | None:
    """The first folder on the way to `path` that other users cannot traverse, if any."""
    for folder in reversed([path, *path.parents]):
        if folder.is_dir() and not folder.stat().st_mode & 0o001:
            return folder
    return None


def _interpreter_paths() -> set[Path]:
    return {Path(sys.prefix), Path(sys.base_prefix), Path(__file__).resolve().parent}


def interpreter_reachable_by_others() -> bool:
    """Whether an unprivileged uid can run this Python: every folder above the venv and
    the base installation must be world-traversable (pyenv under a 0700 /root is not;
    `make setup` fixes that with grant_traversal)."""
    return all(blocked_for_others(p) is None for p in _interpreter_paths())


def grant_traversal() -> list[Path]:
    """As root, add o+x (traverse, not list or read) to the folders that keep the sandbox
    user from this Python; returns the folders changed."""
    changed = []
    if os.geteuid() != 0:
        return changed
    for path in _interpreter_paths():
        while (blocked := blocked_for_others(path)) is not None:
            blocked.chmod(blocked.stat().st_mode | 0o001)
            changed.append(blocked)
    return changed


def _child_env(workdir: Path) -> dict[str, str]:
    """Allow-list environment: no tokens, keys or user settings reach the candidate."""
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
        "HOME": str(workdir),
        "TMPDIR": str(workdir),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(workdir),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "COCOTB_ANSI_OUTPUT": "0",
    }
    return setup_verilator_env(env)


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


def simulator_command(workdir: Path, build_dir: Path, toplevel: str, seed: int, guard: bool):
    """(argv, env) that run the cocotb test module `stimulus` in `workdir` against the
    Verilator build, as `cocotb_tools.runner.Verilator.test` would: the build's binary,
    cocotb's documented environment variables, results in `workdir/results.xml`."""
    embedding = _cocotb_embedding()
    env = _child_env(workdir)
    # The simulator's Python imports the stimulus from the workdir; the guard's
    # sitecustomize comes first and is switched on for that Python only.
    python_path = [str(GUARD_DIR)] if guard else []
    python_path += [str(workdir), *(p for p in sys.path if p and Path(p).exists())]
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
        "COCOTB_RESULTS_FILE": str(workdir / RESULTS_NAME),
        "COCOTB_RESULTS_ATTACHMENTS": "",
    })
    if guard:
        env["CHORUS_GUARD"] = "1"
    return [str(Path(build_dir) / toplevel)], env


def _read_results(path: Path) -> tuple[int | None, int, list[str]]:
    if not path.is_file():
        return None, 0, []
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return None, 0, []
    tests = failures = 0
    messages = []
    for suite in root.iter("testsuite"):
        tests += int(suite.get("tests", 0))
        failures += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
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
    points: dict[str, list[str]] | None = None,
) -> SandboxResult:
    """Simulate `stimulus_text` (a cocotb test module) against the build in `build_dir`;
    coverage counts the points of `points` (default: the build's points manifest)."""
    use_root = limits.drop_privileges and os.geteuid() == 0 and interpreter_reachable_by_others()
    if use_root and (blocked := blocked_for_others(Path(build_dir).resolve())):
        raise PermissionError(
            f"the sandbox user cannot reach the build {build_dir}: {blocked} is not "
            "world-traversable (keep the Verilator cache in a readable place, CHORUS_CACHE_DIR)"
        )
    slot_context = _sandbox_slot() if use_root else contextlib.nullcontext(None)
    with slot_context as slot, tempfile.TemporaryDirectory(
        prefix="chorus-cand-", dir=_workdir_parent(use_root)
    ) as tmp:
        workdir = Path(tmp)
        uid = SANDBOX_UID_BASE + slot if slot is not None else None
        (workdir / f"{STIMULUS_MODULE}.py").write_text(stimulus_text)
        command, sim_env = simulator_command(workdir, build_dir, toplevel, seed, limits.guard)
        job = {
            "command": command,
            "env": sim_env,
            "uid": uid,
            "parent_pid": os.getpid(),  # the child dies with it
            "isolate_network": limits.isolate_network,
            "limits": {
                "mem_mb": limits.mem_mb,
                "cpu_s": limits.cpu_s or int(limits.timeout_s) + 5,
                "nproc": limits.nproc,
                "fsize_mb": limits.fsize_mb,
                "nofile": limits.nofile,
            },
        }
        job_path = workdir / "job.json"
        job_path.write_text(json.dumps(job))
        if uid is not None:
            for path in (workdir, *workdir.iterdir()):
                os.chown(path, uid, uid)
        log_path = workdir / LOG_NAME
        start = time.monotonic()
        with open(log_path, "wb") as log:
            if uid is not None:
                os.chown(log_path, uid, uid)
            proc = subprocess.Popen(
                # -I -S: ignore PYTHON* variables and site-packages; stdlib only
                [sys.executable, "-I", "-S", str(CHILD_SCRIPT), str(job_path)],
                cwd=workdir,
                env=_child_env(workdir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            timed_out = False
            try:
                proc.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_everything(proc, uid)
        wall = time.monotonic() - start
        log_size = log_path.stat().st_size
        with open(log_path, "rb") as handle:
            handle.seek(max(0, log_size - 3000))
            log_tail = handle.read().decode(errors="replace")
        output_limited = log_size >= limits.fsize_mb * 1024 * 1024 - 4096
        tests, failures, messages = _read_results(workdir / RESULTS_NAME)
        coverage_file = workdir / "coverage.dat"
        coverage = (
            read_coverage_dat(coverage_file, points if points is not None else load_points_manifest(build_dir))
            if coverage_file.is_file() else None
        )
        try:
            confinement = json.loads((workdir / "confinement.json").read_text())
        except (OSError, ValueError):
            confinement = {}
        return SandboxResult(
            returncode=proc.returncode,
            timed_out=timed_out,
            wall_s=wall,
            log_tail=log_tail,
            output_limited=output_limited,
            tests=tests,
            failures=failures,
            failure_messages=messages,
            coverage=coverage,
            confinement=confinement,
        )
