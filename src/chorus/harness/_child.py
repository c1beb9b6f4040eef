"""Sandbox child: confine this process, then run the prebuilt simulator (see sandbox.py).

Started as `python -I -S _child.py out/job.json` in the run's folder: standard
library only, so it starts in milliseconds. Confinement comes first, so no candidate
code ever runs unconfined. The job names the simulator command and its environment
(cocotb's variables: test module, toplevel, results file; computed by the parent once
per build), so this process does not import cocotb or its runner.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
MS_RDONLY, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x1, 0x20, 0x1000, 0x4000, 0x40000
PR_SET_PDEATHSIG = 1
# world-writable places a candidate could otherwise write to
SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source, target, fstype, flags, data) -> bool:
    enc = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
    return _libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) == 0


def _isolate_network() -> bool:
    return _libc.unshare(CLONE_NEWNET) == 0


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


SYS_MOUNT_SETATTR = 442  # the same number on every architecture (generic syscall table)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1


def _set_read_only(path: str, read_only: bool, recursive: bool = True) -> bool:
    attr = _MountAttr(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    call = _libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr))
    return call == 0


def _read_only_filesystem() -> str:
    """New mount namespace in which every mount is read-only except the candidate's own
    folder (the cwd): the candidate can write nowhere else, whatever the permissions of
    world-writable folders (/tmp, /var/tmp, /dev/shm, /run/lock, ...). The /dev mount
    (not its sub-mounts) stays writable, for /dev/null and friends. Needs mount_setattr (Linux >= 5.12); older kernels get
    the shared temp folders read-only only. Returns "all", "shared_tmp" or ""."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        return ""
    if not _mount(None, "/", None, MS_REC | MS_PRIVATE, None):
        return ""
    workdir = os.getcwd()
    # the folder becomes a mount of its own, so it can stay writable below a read-only /
    if not _mount(workdir, workdir, None, MS_BIND, None):
        return ""
    if _set_read_only("/", True):
        # /dev itself stays writable (opening /dev/null for writing needs it); its
        # sub-mounts (/dev/shm) stay read-only and only root may create nodes in /dev
        if _set_read_only(workdir, False) and (not os.path.ismount("/dev") or _set_read_only("/dev", False, False)):
            os.chdir(workdir)  # re-resolve the cwd through the new mount
            return "all"
        _set_read_only("/", False)
    ok = True
    for folder in SHARED_TMP:
        if os.path.isdir(folder) and not workdir.startswith(folder + os.sep):
            ok &= _mount(folder, folder, None, MS_BIND | MS_REC, None)
            ok &= _mount(None, folder, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
    os.chdir(workdir)
    return "shared_tmp" if ok else ""


def _set_limits(limits: dict) -> None:
    mb = 1024 * 1024
    for name, value in (
        (resource.RLIMIT_AS, limits["mem_mb"] * mb),
        (resource.RLIMIT_CPU, limits["cpu_s"]),
        (resource.RLIMIT_NPROC, limits["nproc"]),
        (resource.RLIMIT_FSIZE, limits["fsize_mb"] * mb),
        (resource.RLIMIT_NOFILE, limits["nofile"]),
        (resource.RLIMIT_CORE, 0),
    ):
        resource.setrlimit(name, (value, value))


def _die_with_parent(parent_alive) -> None:
    """SIGKILL this process when its parent dies (a scorer killed by SIGKILL or a
    preempted job cannot clean up: without this, a sleeping candidate would outlive it,
    past its wall-clock limit). `parent_alive()` closes the race of a parent that died
    before the request was made."""
    _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)  # 9 = SIGKILL
    if not parent_alive():
        os._exit(137)


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _pipe_writer_alive(fd: int) -> bool:
    import select

    readable, _, _ = select.select([fd], [], [], 0)
    return not readable  # EOF (readable, nothing written ever): the writer is gone


def _enter_pid_namespace() -> int | None:
    """Continue as pid 1 of a new pid namespace (this process stays outside, waits and
    passes the exit code on). When that init ends, the kernel kills and reaps all the
    candidate forked: no process or zombie outlives the candidate to eat the process
    budget of the next candidate in this slot, and the candidate cannot signal its init.
    Returns, in the init, a pipe end that tells whether the process outside lives; None
    where there is no pid namespace."""
    if _libc.unshare(CLONE_NEWPID) != 0:
        return None
    # the init cannot see this process (getppid() is 0 in its namespace): the read end
    # of a pipe whose write end only this process holds reports whether it still lives
    parent_alive_r, parent_alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(parent_alive_w)
        return parent_alive_r
    os.close(parent_alive_r)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def confine(job: dict) -> dict:
    status = {"network_isolated": False, "read_only_fs": "", "privileges_dropped": False,
              "pid_namespace": False}
    _die_with_parent(lambda: os.getppid() == job["parent_pid"])
    outside_alive = None
    if os.geteuid() == 0:
        if job["isolate_network"]:
            status["network_isolated"] = _isolate_network()
        status["read_only_fs"] = _read_only_filesystem()
        outside_alive = _enter_pid_namespace()
        status["pid_namespace"] = outside_alive is not None
    _set_limits(job["limits"])
    if job["uid"] is not None:
        _drop_privileges(job["uid"])
        status["privileges_dropped"] = os.geteuid() == job["uid"]
    if outside_alive is not None:  # the init is a new process, and setuid cleared the request
        _die_with_parent(lambda: _pipe_writer_alive(outside_alive))
    return status


def _open_report(path: str) -> int:
    """The scorer's pre-created confinement.json, opened while still privileged: after
    the drop, only this descriptor can write it (the file is root's, 0600)."""
    return os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    report = _open_report(job["confinement_file"])
    status = confine(job)
    with open(report, "w") as handle:
        handle.write(json.dumps(status))
    import subprocess

    this_pid = os.getpid()
    try:
        code = subprocess.run(
            job["command"], env=job["env"], cwd=job["cwd"], stdin=subprocess.DEVNULL,
            preexec_fn=lambda: _die_with_parent(lambda: os.getppid() == this_pid),
        ).returncode
    except OSError as err:  # the simulator could not start: report it, don't hide it
        print(f"chorus-sandbox: simulator run failed: {err!r}", flush=True)
        return 1
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
