"""Where a sandboxed run's outputs live and how the scorer reads them.

The simulator's outputs decide the reward, and the candidate's code runs inside the
simulator process, so they are placed where the candidate can neither pre-create,
replace, redirect nor write-protect them, and the scorer (often root) reads them only
through descriptors it opened itself, with bounded reads. Layout of one run (as root;
the candidate runs as its sandbox uid):

    chorus-run-XXXX/       root 0711: the run's writable mount; the candidate can add,
                           rename or remove nothing here
      home/                sandbox uid 0700: the candidate's cwd, HOME, TMPDIR, stimulus.py
      out/                 root 0711: nothing can be added, renamed or removed by the candidate
        job.json           root 0600: the child's job (read before the privilege drop)
        sim.log            root 0622: stdout and stderr of the simulator
        results.xml        root 0622: COCOTB_RESULTS_FILE (absolute): the candidate's claim
        inputs.trace       root 0622: --chorus-record (absolute): the inputs to replay
        confinement.json   root 0600: written by the child through a descriptor it opened
                           before dropping privileges

A candidate run by several commands (a SystemVerilog testbench: preprocess, build,
simulate; harness/svtb.py) keeps one home/ across them and gets one such output folder
per command (`RunOutputs(root / name, ...)`), each with the files that command writes.

Every output file is created empty here (O_CREAT|O_EXCL|O_NOFOLLOW) before the child
starts, and a read descriptor to it is kept: the scorer reads that very inode after the
run, never a path the candidate could have swapped for a symlink, a FIFO or a device. A
file still empty afterwards was not written during the run (no coverage, no results);
the simulator opens its outputs with O_TRUNC and rewrites them at the end, so bytes the
candidate put into them earlier do not survive a run that ends normally.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

HOME_DIR = "home"
OUT_DIR = "out"
JOB_NAME = "job.json"
LOG_NAME = "sim.log"
RESULTS_NAME = "results.xml"
COVERAGE_NAME = "coverage.dat"
TRACE_NAME = "inputs.trace"  # Run 1's record of the design's inputs (harness/replay.py)
CONFINEMENT_NAME = "confinement.json"
# written by the cocotb simulator (as the sandbox uid) besides the log, which every
# command has: others may write these files, not read or chmod them. No coverage: the
# score comes from the replay of the trace, outside the candidate's process
SIMULATOR_WRITES = (RESULTS_NAME, TRACE_NAME)
CONFINEMENT_MAX_BYTES = 64 * 1024
RESULTS_MAX_BYTES = 4 * 1024 * 1024  # cocotb's xUnit report: a few KB per test


class OversizedOutput(ValueError):
    """An output file is larger than the scorer is willing to read."""


def _create_empty(path: Path, mode: int) -> int:
    """Create `path` (which must not exist, symlinks included) and return a read
    descriptor to it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    os.fchmod(fd, mode)  # the umask does not decide who may write the result
    return fd


def read_bounded(fd: int, max_bytes: int) -> bytes:
    """The whole content of the regular file open as `fd`; OversizedOutput when it holds
    more than `max_bytes` (a sparse 1 TB file is refused without being read)."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise OversizedOutput("not a regular file")
    if info.st_size > max_bytes:
        raise OversizedOutput(f"{info.st_size} bytes, more than {max_bytes}")
    chunks, offset = [], 0
    while offset <= max_bytes:  # never trust st_size alone: read at most max_bytes + 1
        chunk = os.pread(fd, min(1 << 20, max_bytes + 1 - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    if offset > max_bytes:
        raise OversizedOutput(f"more than {max_bytes} bytes")
    return b"".join(chunks)


def read_tail(fd: int, max_bytes: int) -> bytes:
    """At most the last `max_bytes` bytes of the regular file open as `fd`."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return b""
    start = max(0, info.st_size - max_bytes)
    return os.pread(fd, max_bytes, start)


class RunOutputs:
    """The output folder `out_dir` of one sandboxed command (made here; its parent is
    the run's folder, beside the candidate's home/) and its files: `writes`, the files
    the command writes as the sandbox uid, and the confinement report. `uid`: the sandbox
    uid the candidate runs as (None: the candidate runs as the scorer's own user, and
    these permissions protect nothing)."""

    def __init__(self, out_dir: Path, uid: int | None, writes: tuple[str, ...] = SIMULATOR_WRITES):
        self.out = Path(out_dir)
        self.writes = tuple(writes)
        self.out.mkdir(mode=0o711)
        self._fds: dict[str, int] = {}
        self._modes: dict[str, int] = {}
        try:
            for name in (LOG_NAME, *writes):
                self._modes[name] = 0o622 if uid is not None else 0o600
            self._modes[CONFINEMENT_NAME] = 0o600
            for name, mode in self._modes.items():
                self._fds[name] = _create_empty(self.out / name, mode)
        except BaseException:
            self.close()
            raise
        os.chmod(self.out, 0o711)  # the umask does not decide who may add files

    def path(self, name: str) -> Path:
        return self.out / name

    def log_fd(self) -> int:
        """A write descriptor to sim.log for the child's stdout and stderr."""
        return os.open(self.path(LOG_NAME), os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)

    def size(self, name: str) -> int:
        return os.fstat(self._fds[name]).st_size

    def tampered(self, name: str) -> bool:
        """Whether the file was chmod-ed or linked elsewhere during the run: possible only
        for a candidate running as the scorer's own user (no uid drop), which can make the
        simulator's final write fail that way."""
        info = os.fstat(self._fds[name])
        return stat.S_IMODE(info.st_mode) != self._modes[name] or info.st_nlink != 1

    def read(self, name: str, max_bytes: int) -> bytes | None:
        """The content written during the run; None when nothing was (still empty) or
        the file was tampered with."""
        if self.tampered(name):
            return None
        data = read_bounded(self._fds[name], max_bytes)
        return data or None

    def tail(self, name: str, max_bytes: int) -> bytes:
        return read_tail(self._fds[name], max_bytes)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> RunOutputs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
