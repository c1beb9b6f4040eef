"""Build a task's design once with Verilator --coverage and reuse the build.

The cache key is (design hash, Verilator version, build flags), so thousands of
candidate stimuli for one design share one compiled simulator. Concurrent builders (many
processes, or SLURM jobs on a shared filesystem) serialise on a lock file and publish
the finished build by an atomic rename, so nobody ever sees a half-built folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from chorus.harness.coverage import coverage_universe
from chorus.harness.replay import DRIVER_NAME, DRIVER_SOURCE, PORTS_HEADER, TRACE_VERSION, input_ports, ports_header
from chorus.harness.toolchain import setup_verilator_env, verilator_version
from chorus.harness.verdict import BuildError
from chorus.tasks import Task

REPO_ROOT = Path(__file__).resolve().parents[3]
BASE_FLAGS = ("--coverage", "-Wno-fatal", "-Wno-lint", "-Wno-style")
# Hierarchy-merged coverage and SV `cover property` points need these extra flags.
USER_FLAGS = ("--coverage-user", "--assert")


# system functions whose values do not follow from the design's inputs: the replay
# (harness/replay.py) would reach other coverage than the candidate's run did
_NOT_REPLAYABLE = re.compile(r"\$(random|urandom|urandom_range|dist_\w+|fopen|fread|fgets|fscanf|sscanf)\b")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def replay_problem(task: Task) -> str | None:
    """Why the task's design cannot be scored by replaying its inputs, or None: its RTL
    calls a random-number or file-reading system function, so its behaviour does not
    follow from its top-level inputs alone."""
    for path in task.rtl_files:
        found = _NOT_REPLAYABLE.search(_COMMENT.sub("", Path(path).read_text(errors="replace")))
        if found:
            return (f"{Path(path).name} calls {found.group(0)}: the design's behaviour does not follow "
                    "from its inputs, and candidates are scored by replaying their inputs (docs/task_format.md)")
    return None


def default_cache_dir() -> Path:
    return Path(os.environ.get("CHORUS_CACHE_DIR", REPO_ROOT / ".cache" / "verilator"))


def build_flags(task: Task) -> tuple[str, ...]:
    metrics = task.graded_metrics()
    return BASE_FLAGS + (USER_FLAGS if "user" in metrics else ()) + (("--coverage-fsm",) if "fsm" in metrics else ())


def build_key(task: Task) -> str:
    digest = hashlib.sha256()
    # the driver is part of the simulator: a changed driver is a new build
    driver = hashlib.sha256(DRIVER_SOURCE.read_bytes()).hexdigest()
    for part in (task.design_hash(), verilator_version(), driver, *build_flags(task)):
        digest.update(part.encode() + b"\0")
    return f"{task.toplevel}-{digest.hexdigest()[:16]}"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _make_world_readable(root: Path) -> None:
    """The sandbox runs candidates as an unprivileged user who must read the build."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = Path(dirpath) / name
            path.chmod(path.stat().st_mode | 0o444 | (0o111 if os.access(path, os.X_OK) else 0))


POINTS_MANIFEST = "points.json"
PORTS_MANIFEST = "ports.json"  # the top-level inputs, as the driver numbers them


def compiler_rejected(err: BaseException) -> bool:
    """Whether a build failed because a build command exited non-zero (the design does
    not compile), not for a passing reason (a missing toolchain, a full disk). cocotb's
    runner (2.x) reports such a command with a RuntimeError "Command failed with return
    code: N"; older runners raised CalledProcessError."""
    if isinstance(err, subprocess.CalledProcessError):
        return True
    return type(err) is RuntimeError and str(err).startswith("Command failed with return code")


def _failure_record(cache_dir: Path, key: str) -> Path:
    return cache_dir / f"{key}.failed"


def ensure_build(task: Task, cache_dir: str | Path | None = None, retry_failed: bool = False) -> Path:
    """Return the folder holding the compiled simulator for `task`'s design, building it
    on first use. Raises BuildError when the RTL does not compile.

    A failed compilation is remembered (`<key>.failed`, holding the log), so the
    thousands of candidates of a broken design do not each rebuild it; pass
    `retry_failed=True` (or delete the file) to try again.
    """
    problem = replay_problem(task)
    if problem:
        raise BuildError(f"task {task.id} cannot be scored: {problem}")
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):  # a shared cache owned by someone else
        cache_dir.chmod(0o755)
    key = build_key(task)
    final = cache_dir / key
    if (final / "BUILD_OK").exists() and (final / POINTS_MANIFEST).exists():
        return final
    failed = _failure_record(cache_dir, key)
    if failed.exists() and not retry_failed:
        raise BuildError(f"Verilator build of {task.id} failed (cached: {failed})", failed.read_text())
    with _locked(cache_dir / f"{key}.lock"):
        if (final / "BUILD_OK").exists():  # built by someone else while we waited
            if not (final / POINTS_MANIFEST).exists():  # a build from before manifests
                _write_points_manifest(task, final)
            return final
        if failed.exists() and not retry_failed:
            raise BuildError(f"Verilator build of {task.id} failed (cached: {failed})", failed.read_text())
        # we hold the lock: staging folders of this key are leftovers of killed builders
        for stale in cache_dir.glob(f".{key}.*"):
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache_dir))
        log_path = staging / "build.log"
        try:
            _run_build(task, staging, log_path)
        except Exception as err:
            log = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
            shutil.rmtree(staging, ignore_errors=True)
            if compiler_rejected(err):  # Verilator (or the C++ compiler) said no: remember
                _atomic_write(failed, f"{err}\n{log}")
            raise BuildError(f"Verilator build of {task.id} failed: {err}", log) from err
        _write_points_manifest(task, staging)
        (staging / "BUILD_OK").write_text(verilator_version() + "\n")
        _make_world_readable(staging)
        if final.exists():  # a stale, unfinished folder from a killed build
            shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
        failed.unlink(missing_ok=True)
    return final


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, path)


def load_points_manifest(build_dir: Path) -> dict[str, list[str]] | None:
    """Metric -> point ids the compiled design declares (None for an old build)."""
    path = Path(build_dir) / POINTS_MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def _write_points_manifest(task: Task, build_dir: Path) -> None:
    """Replay an empty trace (our code only, no candidate) once and record every point
    the design declares: the fixed denominators of the coverage fractions."""
    with tempfile.TemporaryDirectory(prefix=".points.", dir=build_dir.parent) as tmp:
        trace, dat = Path(tmp) / "empty.trace", Path(tmp) / "coverage.dat"
        trace.write_text(f"chorus-inputs {TRACE_VERSION} {len(load_input_ports(build_dir))}\nend\n")
        subprocess.run(
            [str(build_dir / task.toplevel), "--chorus-replay", str(trace), f"+verilator+coverage+file+{dat}"],
            cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
        )
        if not dat.is_file():
            raise BuildError(f"the empty simulation of {task.id} wrote no coverage.dat")
        _atomic_write(build_dir / POINTS_MANIFEST, json.dumps(coverage_universe(dat)))


def load_input_ports(build_dir: Path) -> list[dict]:
    """The design's top-level inputs as the build's driver numbers them: [{name, width}]."""
    return json.loads((Path(build_dir) / PORTS_MANIFEST).read_text())


def use_compiler_cache() -> None:
    """Compile through ccache when it is installed: every design compiles the same
    Verilator runtime (verilated*.cpp, the cocotb VPI glue), which is most of a cold
    build (docs/synth.md: 7-9 s -> ~2 s per design). ccache returns the object the
    compiler would produce, so builds and their cache keys are unchanged. One store for
    every build cache, beside the default one (`<default cache>-ccache`, on the same
    shared storage), so short-lived caches leave nothing behind."""
    if "OBJCACHE" not in os.environ and shutil.which("ccache"):
        os.environ["OBJCACHE"] = "ccache"  # read by Verilator's verilated.mk
        cache = default_cache_dir()
        os.environ.setdefault("CCACHE_DIR", str(cache.with_name(cache.name + "-ccache")))


def _run_build(task: Task, build_dir: Path, log_path: Path) -> None:
    """Verilate the design with cocotb's runner's options (the simulator a candidate
    gets is the one cocotb would build), but with the chorus driver as the main
    (harness/driver.cpp: records the inputs in Run 1, replays them in Run 2) and its
    per-design port table generated from the model's header."""
    import cocotb_tools.config

    env = setup_verilator_env(dict(os.environ))
    use_compiler_cache()
    env.update({k: os.environ[k] for k in ("OBJCACHE", "CCACHE_DIR") if k in os.environ})
    shutil.copyfile(DRIVER_SOURCE, build_dir / DRIVER_NAME)
    libs = cocotb_tools.config.libs_dir
    verilate = [
        "verilator", "-cc", "--exe", "-Mdir", str(build_dir), "--top-module", task.toplevel,
        "--vpi", "--public-flat-rw", "--prefix", "Vtop", "-o", task.toplevel,
        "-LDFLAGS", f"-Wl,-rpath,{libs} -L{libs} -lcocotbvpi_verilator",
        *build_flags(task), str(build_dir / DRIVER_NAME), *(str(p.resolve()) for p in task.rtl_files),
    ]
    make = ["make", "-j", str(min(4, os.cpu_count() or 1)), "-C", str(build_dir), "-f", "Vtop.mk", "VM_TRACE=0"]
    with open(log_path, "w") as log:
        _build_step(verilate, build_dir, env, log)
        ports = input_ports((build_dir / "Vtop.h").read_text())
        (build_dir / PORTS_HEADER).write_text(ports_header(ports))
        _atomic_write(build_dir / PORTS_MANIFEST, json.dumps([{"name": p.name, "width": p.width} for p in ports]))
        _build_step(make, build_dir, env, log)


def _build_step(command: list[str], build_dir: Path, env: dict, log) -> None:
    """Run one build command; a non-zero exit is reported as cocotb's runner reports it
    (compiler_rejected)."""
    done = subprocess.run(command, cwd=build_dir, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"Command failed with return code: {done.returncode}")
