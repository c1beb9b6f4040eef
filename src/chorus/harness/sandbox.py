"""Confine one untrusted command: a cocotb stimulus against a prebuilt simulator
(started and read by harness/cocotb_run.py) or a SystemVerilog testbench (svtb.py).

Each candidate runs in its own child process (`harness/_child.py`, standard library
only) that, before any candidate code runs:
- starts a new session (so the whole process tree can be killed),
- enters new mount, pid, IPC, UTS and network namespaces (no interface up: no network at
  all), inside a user namespace of its own when the scorer is not root: the same
  confinement with and without root,
- replaces its root by a fresh tmpfs that holds only what `mount_plan` names: system
  programs and libraries, the Python installation without its site-packages, cocotb and
  its dependencies, the build (all read-only), the run folder (read-only) with the
  candidate's home/ and the output files the command writes (writable and noexec), a
  minimal /dev and a read-only /proc of its pid namespace: the repository,
  the tasks (references, other designs), home folders, /tmp and /run (host sockets) and
  the scorer's sys.path do not exist for the candidate,
- refuses nested user namespaces, memfd, ptrace and process_vm_writev (seccomp), so no
  shared object the candidate writes can be loaded and no helper can patch the simulator,
- sets rlimits: address space, CPU seconds, open files, processes, file size (caps the
  log: a candidate printing gigabytes is stopped), no core dumps,
- when started as root, drops to an unprivileged uid of its own (one per concurrent
  slot) with no supplementary groups, so the process limit really applies (root ignores
  RLIMIT_NPROC) and the candidate cannot signal the scorer.
The child then starts the prebuilt simulator binary itself, with the environment
variables by which cocotb's runner would start it (`cocotb_run.simulator_command`): cocotb and its
runner are imported once in the scorer, not once per candidate. The candidate runs in
an empty folder of its own (removed afterwards, however deep the tree it left) with an
environment stripped to an allow-list; the simulator's outputs go to a folder beside it
that the candidate cannot change (`harness/outputs.py`: read-only in its root but for
the files the command writes), and the scorer reads them through descriptors it holds.
The parent enforces a wall-clock timeout and, when it ends, kills every process left in
the session and every process of the sandbox uid.

Without root on a host where user namespaces are disabled, only rlimits, timeout, temp
dir and stripped environment apply: a loud warning says so (see docs/harness.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import json
import logging
import os
import signal
import site
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from chorus.harness.outputs import (
    CONFINEMENT_MAX_BYTES,
    CONFINEMENT_NAME,
    HOME_DIR,
    JOB_NAME,
    LOG_NAME,
    SIMULATOR_WRITES,
    OversizedOutput,
    RunOutputs,
)
from chorus.harness.toolchain import setup_verilator_env

SANDBOX_UID_BASE = 61000
SLOT_COUNT = 512
SLOT_DIR = Path(tempfile.gettempdir()) / "chorus-sandbox-slots"
LOG_TAIL_BYTES = 3000
CHILD_SCRIPT = Path(__file__).resolve().parent / "_child.py"
GUARD_DIR = Path(__file__).resolve().parent / "guard"
# what the candidate's file system holds besides Python and cocotb (read-only)
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# /etc/alternatives: the links behind cc, c++ (a SystemVerilog testbench's compile)
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
SIMULATOR_DISTRIBUTIONS = ("cocotb",)  # with their requirements: all the candidate can import
log = logging.getLogger(__name__)


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
    build_timeout_s: float = 300.0  # a SystemVerilog testbench's compile (harness/svtb.py)
    # at least this niceness for every process of the run: beside a GPU trainer (the RL
    # reward) the simulations then yield a contended core to the process feeding the GPU
    nice: int = 0


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
    """Candidates' folders: CHORUS_SANDBOX_DIR when set; as root, outside the shared temp
    folders (node-local /run); otherwise the usual temp dir."""
    configured = os.environ.get("CHORUS_SANDBOX_DIR")
    if not as_root and not configured:
        return tempfile.gettempdir()
    parent = Path(configured or "/run/chorus-sandbox")
    parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    return str(parent)


def remove_tree(path: str | Path, deadline: float | None = None) -> bool:
    """Remove the folder `path` and all in it, however deep (a candidate can nest folders
    thousands of levels down, past PATH_MAX and past the recursion of shutil.rmtree) and
    however wide (50,000 sibling folders), whatever modes it left. One descriptor at a
    time walks down (openat) and back up (".."); each folder is listed once, and the
    names of its subfolders still to visit are kept per level, so the work is linear in
    the number of entries. Stops at `deadline` (time.monotonic()) and returns False with
    the rest left in place; True once `path` is gone (also when something else removed
    it first). For a folder no live process writes to."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return True
    names: list[str] = []  # the way down from `path`, one folder name per level
    pending: list[list[str] | None] = [_clear_files(fd, deadline)]  # per level: subfolders left
    try:
        while pending:
            if pending[-1] is None or (deadline is not None and time.monotonic() > deadline):
                return False
            if pending[-1]:
                deeper = pending[-1].pop()
                with contextlib.suppress(OSError):
                    os.chmod(deeper, 0o700, dir_fd=fd)  # a folder the candidate made unreadable
                try:
                    child = os.open(deeper, flags, dir_fd=fd)
                except FileNotFoundError:
                    continue
                os.close(fd)
                fd = child
                names.append(deeper)
                pending.append(_clear_files(fd, deadline))
            else:
                pending.pop()
                if not names:
                    break
                parent = os.open("..", flags, dir_fd=fd)
                os.close(fd)
                fd = parent
                with contextlib.suppress(FileNotFoundError):
                    os.rmdir(names.pop(), dir_fd=fd)
    finally:
        os.close(fd)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)
    return True


def _clear_files(fd: int, deadline: float | None) -> list[str] | None:
    """Unlink every non-folder and remove every empty folder in the folder open as `fd`;
    the names of the subfolders left to walk into, or None when `deadline` passed first."""
    folders = []
    for count, entry in enumerate(os.scandir(fd)):
        if deadline is not None and count % 256 == 255 and time.monotonic() > deadline:
            return None
        try:
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.name, dir_fd=fd)
            else:
                os.rmdir(entry.name, dir_fd=fd)  # most folders are empty: no walk
        except FileNotFoundError:
            pass
        except OSError:  # not empty, or not ours to remove yet (a read-only folder)
            folders.append(entry.name)
    return folders


CLEANUP_WAIT_S = 5.0  # the longest a scorer waits on removing a candidate's folder
TRASH_DIR = ".chorus-trash"


def discard_tree(path: str | Path, wait_s: float = CLEANUP_WAIT_S) -> None:
    """Remove a candidate's folder, waiting at most `wait_s`: what is left then is moved
    (one rename) into the trash folder beside it and removed by a background thread,
    so no shape of the candidate's files holds up the scorer. The trash of a scorer
    killed before its thread finished is removed by the next one's."""
    if remove_tree(path, time.monotonic() + wait_s):
        return
    trash = Path(path).parent / TRASH_DIR
    try:
        trash.mkdir(mode=0o700, exist_ok=True)
        os.rename(path, trash / Path(path).name)
    except OSError:  # a trash folder of another user: remove it where it is, in the background
        threading.Thread(target=remove_tree, args=(path,), name="chorus-trash", daemon=True).start()
        return
    _start_trash_sweeper(trash)


_sweeper_lock = threading.Lock()
_sweeping: set[str] = set()


def _start_trash_sweeper(trash: Path) -> None:
    """A background thread that empties `trash` (one per folder at a time); what is
    moved in while it runs is removed by it too (it decides to stop under the lock its
    starters take)."""
    with _sweeper_lock:
        if str(trash) in _sweeping:
            return
        _sweeping.add(str(trash))

    def sweep() -> None:
        while True:
            removed = False
            for name in _listing(trash):
                with contextlib.suppress(OSError):  # one that cannot go: left to the next sweep
                    removed = remove_tree(trash / name) or removed
            with _sweeper_lock:
                if not removed or not _listing(trash):
                    _sweeping.discard(str(trash))
                    break
        with contextlib.suppress(OSError):  # not empty: moved in meanwhile, or stuck
            os.rmdir(trash)

    threading.Thread(target=sweep, name="chorus-trash", daemon=True).start()


def _listing(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:  # gone, or another user's
        return []


RUN_PREFIX = "chorus-run-"  # a candidate's folder, flock()ed by its scorer while in use
_NEW_PREFIX = ".chorus-new-"  # one being made, not yet locked


@contextlib.contextmanager
def _candidate_folder(parent: str):
    """A fresh folder in `parent`, locked (flock on the folder) until it is discarded: a
    scorer killed before its cleanup releases the lock with its death, and the next
    scorer in `parent` moves the folder to the trash (_sweep_abandoned)."""
    _sweep_abandoned(Path(parent))
    staging = tempfile.mkdtemp(prefix=_NEW_PREFIX, dir=parent)
    lock = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder = os.path.join(parent, RUN_PREFIX + os.path.basename(staging)[len(_NEW_PREFIX):])
        os.rename(staging, folder)  # the same inode: locked from the moment it has its name
        try:
            yield folder
        finally:
            discard_tree(folder)
    finally:
        os.close(lock)


def _sweep_abandoned(parent: Path) -> None:
    """Move every run folder in `parent` whose scorer is gone (its lock is free) to the
    trash, and empty the trash in the background."""
    trash = parent / TRASH_DIR
    for name in _listing(parent):
        if not name.startswith(RUN_PREFIX):
            continue
        try:
            fd = os.open(parent / name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            trash.mkdir(mode=0o700, exist_ok=True)
            os.rename(parent / name, trash / name)
        except OSError:  # held: a live scorer's (BlockingIOError), or not ours to move
            continue
        finally:
            os.close(fd)
    if trash.is_dir():
        _start_trash_sweeper(trash)


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


def child_env(workdir: Path) -> dict[str, str]:
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


# -- what the candidate's file system holds ------------------------------------------------
def _reveal(path: str, kind: str, depth: int = 0) -> list[dict]:
    """Mount plan entries that make `path` appear at the same place in the sandbox: each
    symbolic link on the way recreated, the real folder or file bound as `kind`."""
    parts = Path(path).parts
    for i in range(2, len(parts) + 1):
        prefix = os.path.join(*parts[:i])
        if os.path.islink(prefix) and depth < 40:
            target = os.readlink(prefix)
            rest = os.path.normpath(os.path.join(os.path.dirname(prefix), target, *parts[i:]))
            return [{"kind": "symlink", "path": prefix, "target": target}, *_reveal(rest, kind, depth + 1)]
    return [{"kind": kind, "path": os.path.normpath(path)}] if os.path.exists(path) else []


def _requirement_closure(names) -> list:
    """The installed distributions `names` and everything they require (in this Python,
    extras left out)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    found, todo = {}, list(names)
    while todo:
        name = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


@functools.cache
def _simulator_packages() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(site folder, top-level entries) of every distribution the simulator's Python
    needs: cocotb and its requirements. Bytecode caches and files installed outside the
    site folder (scripts) are left out."""
    packages: dict[str, set[str]] = {}
    for dist in _requirement_closure(SIMULATOR_DISTRIBUTIONS):
        site_folder = os.path.realpath(dist.locate_file(""))
        tops = {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] not in ("..", "__pycache__")}
        packages.setdefault(site_folder, set()).update(
            t for t in tops if not t.endswith(".pth") and os.path.exists(os.path.join(site_folder, t))
        )
    return tuple((folder, tuple(sorted(tops))) for folder, tops in sorted(packages.items()))


def simulator_site_folders() -> list[str]:
    return [folder for folder, _ in _simulator_packages()]


def _site_folders() -> set[str]:
    """Every folder of third-party packages this Python (and the system's) could import
    from: they are hidden behind empty folders, cocotb's packages bound back in."""
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    found = set(site.getsitepackages()) | {site.getusersitepackages()} | set(sys.path)
    for prefix in {sys.prefix, sys.base_prefix, "/usr", "/usr/local"}:
        for pattern in ("lib*/python3*/site-packages", "lib*/python3*/dist-packages", "lib/python3/dist-packages"):
            found.update(glob.glob(os.path.join(prefix, pattern)))
    folders = {os.path.realpath(p) for p in found if p and os.path.isdir(p)}
    # not the standard library (lib-dynload, the zip) nor a folder that holds it
    return {
        f for f in folders
        if os.path.basename(f) in ("site-packages", "dist-packages")
        or not (_within(f, stdlib) or _within(stdlib, f))
    }


def _within(path: str, folder: str) -> bool:
    return (path + os.sep).startswith(folder + os.sep)


@functools.cache
def _environment_plan() -> tuple[dict, ...]:
    """The part of the mount plan that is the same for every candidate of this scorer."""
    entries = []
    for path in SYSTEM_PATHS + SYSTEM_FILES:
        entries += _reveal(path, "ro")
    # this Python: its installation (the standard library, libpython), the venv's
    # interpreter links and pyvenv.cfg, by which the simulator's Python finds cocotb
    for path in (sys.base_prefix, os.path.dirname(sys.executable), os.path.join(sys.prefix, "pyvenv.cfg")):
        entries += _reveal(path, "ro")
    read_only = [e["path"] for e in entries if e["kind"] == "ro"]
    for folder in sorted(_site_folders()):
        if any(_within(folder, tree) for tree in read_only):
            entries.append({"kind": "mask", "path": folder})
    for folder, tops in _simulator_packages():
        for top in tops:
            entries += _reveal(os.path.join(folder, top), "ro")
    return tuple(entries)


def mount_plan(read_only, writable=()) -> list[dict]:
    """What the candidate's root holds, in mount order (a folder before what is mounted
    inside it): `kind` "ro" (read-only bind), "rw" (writable, noexec), "mask" (an empty
    read-only folder over one that a read-only bind brought in) or "symlink". Besides
    the environment (system, Python, cocotb): the folders or files `read_only` (a build,
    the guard, a run's folder) and `writable` (a home, single output files)."""
    entries = list(_environment_plan())
    for path in read_only:
        entries += _reveal(str(Path(path).resolve()), "ro")
    for path in writable:
        entries += _reveal(str(Path(path).resolve()), "rw")
    unique = {}
    for entry in entries:
        unique.setdefault(entry["path"], entry)
    ordered = sorted(unique.values(), key=lambda e: Path(e["path"]).parts)
    # a read-only bind inside another one shows nothing new (unless a mask lies between)
    plan, covering = [], []
    for entry in ordered:
        covering = [c for c in covering if _within(entry["path"], c["path"])]
        if not (entry["kind"] == "ro" and covering and covering[-1]["kind"] == "ro"):
            plan.append(entry)
        if entry["kind"] in ("ro", "mask"):
            covering.append(entry)
    return plan


@functools.cache
def confinement_support() -> dict:
    """What the child can confine on this host, tried once per process in a throwaway
    child: {"namespaces": "user" | "root" | ""}. "" means candidates would run with the
    scorer's rights (an unprivileged scorer where user namespaces are disabled)."""
    probe = subprocess.run(
        [sys.executable, "-I", "-S", str(CHILD_SCRIPT), "--probe"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    try:
        return json.loads(probe.stdout)
    except ValueError:
        return {"namespaces": "", "error": (probe.stdout + probe.stderr)[-500:]}


def _warn_if_unconfined() -> None:
    if not confinement_support().get("namespaces"):
        _warn_once(
            "chorus sandbox: NO namespace confinement on this host (unprivileged user "
            "namespaces are disabled, or root lacks CAP_SYS_ADMIN): candidates run with the "
            "scorer's rights (or, for a root scorer, a sandbox uid's), limited by rlimits and the "
            "in-process guard. Enable "
            "user namespaces (sysctl kernel.unprivileged_userns_clone=1 / "
            "user.max_user_namespaces) or score as root; see docs/harness.md."
        )


@functools.cache
def _warn_once(message: str) -> None:
    log.warning(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _slot_uid(slot: int | None) -> int | None:
    return SANDBOX_UID_BASE + slot if slot is not None else None


def _read_output(outputs: RunOutputs, name: str, max_bytes: int) -> bytes | None:
    """An output file's content; None when it was not written (or is too large)."""
    try:
        return outputs.read(name, max_bytes)
    except OversizedOutput:
        return None


# -- one confined command: cocotb candidates and SystemVerilog testbenches ----------------
@dataclass
class ConfinedFolder:
    """A candidate's run folder (`root`, root 0711 as root) with its `home` (the
    candidate's cwd, HOME and TMPDIR; the sandbox uid's) and its sandbox `uid` (None
    without root). Each command run in it writes to an output folder of its own beside
    `home` (`outputs`); the commands share `home`."""

    root: Path
    home: Path
    uid: int | None
    namespaced: bool = True  # whether the child confines through namespaces here
    handed_over: bool = False  # whether home's tree belongs to `uid` yet

    def outputs(self, name: str, writes: tuple[str, ...] = SIMULATOR_WRITES) -> RunOutputs:
        return RunOutputs(self.root / name, self.uid, writes)


@contextlib.contextmanager
def confined_workdir(limits: SandboxLimits = SandboxLimits()):
    """A ConfinedFolder for one candidate: a fresh folder (CHORUS_SANDBOX_DIR or a temp
    folder; removed afterwards, however deep) and, as root, a sandbox uid of its own,
    both held until the block ends."""
    namespaced = bool(confinement_support().get("namespaces"))
    use_root = limits.drop_privileges and os.geteuid() == 0 and (namespaced or interpreter_reachable_by_others())
    if limits.drop_privileges and os.geteuid() == 0 and not use_root:
        # no namespaces and no uid drop would leave the candidate root: refuse (the
        # candidate gets sandbox_error, and the preflight stops the run with this reason)
        raise PermissionError(
            "refusing to run a candidate as root: this host gives no namespaces and the sandbox "
            "uid cannot reach the Python interpreter (make it world-traversable: `make setup`, "
            "chorus.harness.sandbox.grant_traversal)"
        )
    _warn_if_unconfined()
    slot_context = _sandbox_slot() if use_root else contextlib.nullcontext(None)
    with slot_context as slot, _candidate_folder(_workdir_parent(use_root)) as tmp:
        folder = ConfinedFolder(Path(tmp), Path(tmp) / HOME_DIR, _slot_uid(slot), namespaced)
        folder.home.mkdir(mode=0o700)
        if folder.uid is not None:
            os.chmod(folder.root, 0o711)  # the candidate may enter, and change nothing here
        yield folder


@dataclass
class ConfinedRun:
    returncode: int | None
    timed_out: bool
    wall_s: float
    log_tail: str
    output_limited: bool
    confinement: dict = field(default_factory=dict)


def run_confined(
    command: list[str],
    env: dict[str, str],
    folder: ConfinedFolder,
    outputs: RunOutputs,
    limits: SandboxLimits = SandboxLimits(),
    read_only: list[Path] | tuple[Path, ...] = (),
    home_writable: bool = True,
) -> ConfinedRun:
    """Run `command` with `env` in `folder.home` through the sandbox child (network,
    filesystem, pid namespace, rlimits, uid, wall-clock timeout, every process killed at
    the end); stdout and stderr go to `outputs`' sim.log, whatever else the command
    writes for the scorer to files of `outputs` (absolute paths). On the first command
    of a folder, what the scorer put into home is handed to the sandbox uid (before any
    candidate process ran: later the tree is the candidate's and is not walked as root).

    The command's root (mount_plan) holds the environment, the folders `read_only`
    (read-only, executable: a build, a toolchain), the run's folder read-only, and
    writable (noexec) only home/ and the files `outputs` has the command write: so even
    a candidate running as the scorer's own uid (no root) cannot swap, remove or add an
    output file. `home_writable=False`: home/ read-only and executable instead, for a
    command that runs what an earlier command built there (svtb's simulate step)."""
    if folder.uid is not None and not folder.handed_over:
        for dirpath, dirnames, filenames in os.walk(folder.home):
            for name in (".", *dirnames, *filenames):
                os.chown(os.path.join(dirpath, name), folder.uid, folder.uid, follow_symlinks=False)
    folder.handed_over = True
    job_path = outputs.path(JOB_NAME)  # root's, 0600: read by the child before the drop
    with open(os.open(job_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "w") as handle:
        handle.write(json.dumps(_child_job(command, env, folder, outputs, limits, read_only, home_writable)))
    start = time.monotonic()
    returncode, timed_out = _run_child(job_path, folder, outputs, limits)
    wall = time.monotonic() - start
    # every read goes through the descriptors RunOutputs kept on the files it created,
    # and is bounded, whatever the candidate did to the paths (outputs.py)
    try:
        confinement = json.loads(_read_output(outputs, CONFINEMENT_NAME, CONFINEMENT_MAX_BYTES) or b"{}")
    except ValueError:
        confinement = {}
    return ConfinedRun(
        returncode=returncode,
        timed_out=timed_out,
        wall_s=wall,
        log_tail=outputs.tail(LOG_NAME, LOG_TAIL_BYTES).decode(errors="replace"),
        output_limited=outputs.size(LOG_NAME) >= limits.fsize_mb * 1024 * 1024 - 4096,
        confinement=confinement if isinstance(confinement, dict) else {},
    )


def _child_job(command, env, folder: ConfinedFolder, outputs: RunOutputs, limits: SandboxLimits,
               read_only, home_writable: bool) -> dict:
    """What the sandbox child (_child.py) is to do: the command, its mounts (the run's
    folder and `read_only` read-only; home/ when `home_writable` and the output files
    writable), its uid, its rlimits."""
    return {
        "command": command,
        "env": env,
        "cwd": str(folder.home),
        "confinement_file": str(outputs.path(CONFINEMENT_NAME)),
        "mounts": mount_plan(
            [folder.root, *read_only],
            [*([folder.home] if home_writable else []), *(outputs.path(n) for n in outputs.writes)],
        ),
        "uid": folder.uid,
        "parent_pid": os.getpid(),  # the child dies with it
        "isolate_network": limits.isolate_network,
        "limits": {
            "mem_mb": limits.mem_mb,
            "cpu_s": limits.cpu_s or int(limits.timeout_s) + 5,
            "nproc": limits.nproc,
            "fsize_mb": limits.fsize_mb,
            "nofile": limits.nofile,
            "nice": limits.nice,
        },
    }


def _run_child(job_path: Path, folder: ConfinedFolder, outputs: RunOutputs,
               limits: SandboxLimits) -> tuple[int | None, bool]:
    """Start the sandbox child on `job_path` and wait at most `limits.timeout_s`; every
    process of the candidate is killed at the end. (exit status, whether it timed out)."""
    with open(outputs.log_fd(), "wb") as log:
        proc = subprocess.Popen(
            # -I -S: ignore PYTHON* variables and site-packages; stdlib only. The cwd is
            # the run's folder: the child's writable mount holds home/ and the outputs
            [sys.executable, "-I", "-S", str(CHILD_SCRIPT), str(job_path)],
            cwd=folder.root,
            env=child_env(folder.home),
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
            _kill_everything(proc, folder.uid)
    return proc.returncode, timed_out
