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
import os
import shutil
import tempfile
from pathlib import Path

from chorus.harness.toolchain import setup_verilator_env, verilator_version
from chorus.tasks import Task

REPO_ROOT = Path(__file__).resolve().parents[3]
BASE_FLAGS = ("--coverage", "-Wno-fatal", "-Wno-lint", "-Wno-style")
# Hierarchy-merged coverage and SV `cover property` points need these extra flags.
USER_FLAGS = ("--coverage-user", "--assert")


class BuildError(RuntimeError):
    """The design did not compile; `log` holds the tail of the compiler output."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


def default_cache_dir() -> Path:
    return Path(os.environ.get("CHORUS_CACHE_DIR", REPO_ROOT / ".cache" / "verilator"))


def build_flags(task: Task) -> tuple[str, ...]:
    return BASE_FLAGS + (USER_FLAGS if "user" in task.coverage_target else ())


def build_key(task: Task) -> str:
    digest = hashlib.sha256()
    for part in (task.design_hash(), verilator_version(), *build_flags(task)):
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


def ensure_build(task: Task, cache_dir: str | Path | None = None) -> Path:
    """Return the folder holding the compiled simulator for `task`'s design, building it
    on first use. Raises BuildError when the RTL does not compile."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache_dir.chmod(0o755)
    final = cache_dir / build_key(task)
    if (final / "BUILD_OK").exists():
        return final
    with _locked(cache_dir / f"{final.name}.lock"):
        if (final / "BUILD_OK").exists():  # built by someone else while we waited
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=cache_dir))
        log_path = staging / "build.log"
        try:
            _run_build(task, staging, log_path)
        except Exception as err:
            log = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
            shutil.rmtree(staging, ignore_errors=True)
            raise BuildError(f"Verilator build of {task.id} failed: {err}", log) from err
        (staging / "BUILD_OK").write_text(verilator_version() + "\n")
        _make_world_readable(staging)
        if final.exists():  # a stale, unfinished folder from a killed build
            shutil.rmtree(final, ignore_errors=True)
        os.rename(staging, final)
    return final


def _run_build(task: Task, build_dir: Path, log_path: Path) -> None:
    setup_verilator_env()
    from cocotb_tools.runner import get_runner

    runner = get_runner("verilator")
    runner.build(
        sources=[str(p.resolve()) for p in task.rtl_files],
        hdl_toplevel=task.toplevel,
        build_args=list(build_flags(task)),
        build_dir=str(build_dir),
        always=True,
        log_file=str(log_path),
    )
