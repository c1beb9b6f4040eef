"""Sandbox child: confine this process, then run the prebuilt simulator (see sandbox.py).

Started as `python -I -S _child.py out/job.json` in the run's folder: standard
library only, so it starts in milliseconds. Confinement comes first, so no candidate
code ever runs unconfined. The job names the simulator command and its environment
(cocotb's variables: test module, toplevel, results file; computed by the parent once
per build) and the mount plan of the candidate's file system (`sandbox.mount_plan`), so
this process does not import cocotb or its runner.

Confinement, the same with and without root:
- new user (unprivileged scorer), mount, pid, IPC, UTS and network namespaces;
- a new root: an empty tmpfs holding only the plan's read-only binds (system programs
  and libraries, the Python installation without its site-packages, cocotb and its
  dependencies, the build, the run folder) and its writable, noexec binds (the
  candidate's home/, the output files the command writes), a minimal /dev
  and a /proc of the new pid namespace (read-only); the host's root is detached;
- no nested user namespaces (the candidate cannot regain capabilities to mount an
  executable tmpfs), no memfd (no executable anonymous file), no ptrace or
  process_vm_writev (no patching of the simulator from a helper process): seccomp;
- as root, the candidate runs under a sandbox uid of its own (sandbox.py picks it).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import struct
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 0x400, 0x800, 0x200000, 0x1000000
ST_NOATIME, ST_NODIRATIME, ST_RELATIME = 0x400, 0x800, 0x1000
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 1, 22, 38
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
X32_SYSCALL_BIT = 0x40000000
# the system call numbers this file needs (pivot_root has no libc wrapper; the rest
# are refused by the seccomp filter), per architecture
SYSCALLS = {
    "x86_64": {"audit_arch": 0xC000003E, "pivot_root": 155, "clone": 56, "unshare": 272, "clone3": 435,
               "refused": {"memfd_create": 319, "memfd_secret": 447, "ptrace": 101, "process_vm_writev": 311,
                           "pidfd_getfd": 438}},
    "aarch64": {"audit_arch": 0xC00000B7, "pivot_root": 41, "clone": 220, "unshare": 97, "clone3": 435,
                "refused": {"memfd_create": 279, "memfd_secret": 447, "ptrace": 117, "process_vm_writev": 271,
                            "pidfd_getfd": 438}},
}
ARCH = SYSCALLS.get(os.uname().machine)
NEW_ROOT = "/tmp"  # any existing folder: the tmpfs mounted over it becomes the root
OLD_ROOT = "/.oldroot"
DEVICES = ("null", "zero", "full", "random", "urandom")
_libc = ctypes.CDLL(None, use_errno=True)


class ConfinementError(OSError):
    pass


def _call(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ConfinementError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
    _call(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
          f"mount {source or fstype} on {target}")


def _prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return _libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0))


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


# -- namespaces -------------------------------------------------------------------------
def _enter_namespaces(isolate_network: bool, as_root: bool) -> str:
    """Unshare mount, pid, IPC, UTS (and network) namespaces; returns "user" (inside a
    user namespace of our own: how an unprivileged scorer gets them), "root" (made
    directly as root) or "" (none: user namespaces disabled for an unprivileged scorer,
    or a root without CAP_SYS_ADMIN, as in a default container)."""
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    flags |= CLONE_NEWNET if isolate_network else 0
    if as_root:
        # root makes them directly (then drops to the sandbox uid; seccomp forbids new user
        # namespaces to the candidate)
        return "root" if _libc.unshare(flags) == 0 else ""
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(flags | CLONE_NEWUSER) != 0:
        return ""
    _own_id_maps(uid, gid)
    return "user"


def _own_id_maps(uid: int, gid: int) -> None:
    """In a new user namespace, keep our own uid and gid (and nothing else): the candidate
    runs as the same, unprivileged ids, so it has no capabilities after exec."""
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def _enter_pid_namespace() -> int:
    """Continue as pid 1 of the new pid namespace (this process stays outside, waits and
    passes the exit code on). When that init ends, the kernel kills and reaps all the
    candidate forked: no process or zombie outlives the candidate to eat the process
    budget of the next candidate in this slot, and the candidate cannot signal its init.
    Returns, in the init, a pipe end that tells whether the process outside lives."""
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


# -- the candidate's file system -----------------------------------------------------------
def _kept_flags(path: str) -> int:
    """The flags a remount of `path` must repeat: in a user namespace the kernel refuses
    to clear read-only, nosuid, nodev, noexec or the atime mode of a mount it inherited."""
    found = os.statvfs(path).f_flag
    flags = found & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    flags |= (MS_NOATIME if found & ST_NOATIME else 0) | (MS_NODIRATIME if found & ST_NODIRATIME else 0)
    if found & ST_RELATIME:
        flags |= MS_RELATIME
    elif not found & ST_NOATIME:
        flags |= MS_STRICTATIME
    return flags


def _remount(path: str, flags: int) -> None:
    _mount(None, path, None, MS_REMOUNT | MS_BIND | flags | _kept_flags(path))


# per kind of bind: the flags of the mount; every writable one is noexec, so nothing
# the candidate writes can be executed or loaded as a shared object
BIND_FLAGS = {
    "ro": MS_RDONLY | MS_NOSUID | MS_NODEV,
    "rw": MS_NOSUID | MS_NODEV | MS_NOEXEC,
    "dev": MS_NOSUID | MS_NOEXEC,  # a device node: writable (/dev/null), usable
}


def _mount_point(path: str, directory: bool) -> None:
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if directory:
        os.mkdir(path)
    else:
        open(path, "w").close()


def _bind(source: str, target: str, kind: str) -> None:
    _mount_point(target, os.path.isdir(source))
    _mount(source, target, None, MS_BIND | MS_REC)
    _remount(target, BIND_FLAGS[kind])  # at once: no later mkdir can reach the host


def _build_root(mounts: list[dict]) -> None:
    """Replace the root by an empty tmpfs that holds only `mounts` (sandbox.mount_plan),
    a minimal /dev and a /proc of this pid namespace; detach the host's root. What the
    plan does not name (the repository, the tasks, home folders, the scorer's sys.path,
    /tmp, /run and the host's Unix sockets) does not exist for the candidate."""
    cwd = os.getcwd()
    os.umask(0o022)  # the folders made on the way must be traversable by the sandbox uid
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates to the host
    _mount("tmpfs", NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    os.mkdir(NEW_ROOT + OLD_ROOT)
    _call(_libc.syscall(ARCH["pivot_root"], NEW_ROOT.encode(), (NEW_ROOT + OLD_ROOT).encode()), "pivot_root")
    os.chdir("/")
    for entry in mounts:
        path, kind = entry["path"], entry["kind"]
        if kind == "symlink":
            if not os.path.lexists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.symlink(entry["target"], path)
        elif kind == "mask":  # an empty folder over one inside a read-only bind
            if os.path.isdir(path):
                _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        elif os.path.exists(OLD_ROOT + entry.get("source", path)):
            _bind(OLD_ROOT + entry.get("source", path), path, kind)
    _mount_point("/dev", True)
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        _bind(f"{OLD_ROOT}/dev/{name}", f"/dev/{name}", "dev")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")
    _mount_point("/proc", True)
    # (the kernel allows a new proc mount only while a full one is visible: before the detach)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _call(_libc.umount2(OLD_ROOT.encode(), MNT_DETACH), "detach the host's root")
    os.rmdir(OLD_ROOT)
    writable = {e["path"] for e in mounts if e["kind"] == "rw"} | {f"/dev/{n}" for n in DEVICES}
    for mount_point in _mount_points():  # /proc too: no write to /proc/self/mem
        if mount_point not in writable:
            _remount(mount_point, BIND_FLAGS["ro"])  # (noexec kept where it is)
    os.chdir(cwd)


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4] for line in handle]
    # mountinfo escapes space, tab, newline and backslash as octal
    return [p.encode().decode("unicode_escape").encode("latin-1").decode() for p in points]


# -- what the candidate's processes may call ---------------------------------------------
def _seccomp_filter() -> bool:
    """Refuse (EPERM) memfd_create and memfd_secret (an anonymous file is not on a noexec
    mount: it could be loaded as a shared object through /proc/self/fd), ptrace,
    process_vm_writev and pidfd_getfd (a helper process patching the simulator), a new
    user namespace (clone or unshare with CLONE_NEWUSER: capabilities in it would let the
    candidate mount an executable tmpfs; clone3, whose flags a filter cannot read, says
    ENOSYS and libc falls back to clone), every call of the x32 ABI and of any other
    architecture. Inherited by every descendant."""
    if ARCH is None:
        return False
    ld_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    # (code, label if true, label if false, k): labels resolved to relative jumps below
    program = [
        ("arch", ld_abs, None, None, 4),  # seccomp_data.arch
        (None, jeq, None, "refuse", ARCH["audit_arch"]),
        (None, ld_abs, None, None, 0),  # seccomp_data.nr
        (None, jge, "refuse", None, X32_SYSCALL_BIT),
        *[(None, jeq, "refuse", None, nr) for nr in ARCH["refused"].values()],
        (None, jeq, "enosys", None, ARCH["clone3"]),
        (None, jeq, "flags", None, ARCH["clone"]),
        (None, jeq, "flags", None, ARCH["unshare"]),
        (None, ret, None, None, SECCOMP_RET_ALLOW),
        ("flags", ld_abs, None, None, 16),  # the low half of args[0]: the clone flags
        (None, jset, "refuse", None, CLONE_NEWUSER),
        (None, ret, None, None, SECCOMP_RET_ALLOW),
        ("refuse", ret, None, None, SECCOMP_RET_ERRNO | EPERM),
        ("enosys", ret, None, None, SECCOMP_RET_ERRNO | ENOSYS),
    ]
    at = {label: i for i, (label, *_) in enumerate(program) if label}
    jump = lambda i, label: 0 if label is None else at[label] - i - 1  # noqa: E731
    code = b"".join(
        struct.pack("HBBI", op, jump(i, if_true), jump(i, if_false), k)
        for i, (_, op, if_true, if_false, k) in enumerate(program)
    )
    buffer = ctypes.create_string_buffer(code)

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Program(len(program), ctypes.addressof(buffer))
    # unprivileged processes may install a filter only without a way to new privileges
    # (setuid programs): no_new_privs, which suits the candidate anyway
    if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0:
        return False
    return _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog)) == 0


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
    # raised only: an unprivileged process may not lower its niceness
    os.setpriority(os.PRIO_PROCESS, 0, max(os.getpriority(os.PRIO_PROCESS, 0), limits.get("nice", 0)))


def _die_with_parent(parent_alive) -> None:
    """SIGKILL this process when its parent dies (a scorer killed by SIGKILL or a
    preempted job cannot clean up: without this, a sleeping candidate would outlive it,
    past its wall-clock limit). `parent_alive()` closes the race of a parent that died
    before the request was made. Credential changes (uid drop, new user namespace)
    clear the request: it is made again after each."""
    _prctl(PR_SET_PDEATHSIG, 9)  # 9 = SIGKILL
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


def confine(job: dict) -> dict:
    status = {"namespaces": "", "user_namespace": False, "network_isolated": False, "filesystem": "",
              "pid_namespace": False, "ipc_namespace": False, "privileges_dropped": False,
              "nested_userns_blocked": False, "proc_read_only": False, "seccomp": False, "warning": ""}
    parent_alive = lambda: os.getppid() == job["parent_pid"]  # noqa: E731
    _die_with_parent(parent_alive)
    as_root = os.geteuid() == 0
    mode = _enter_namespaces(job["isolate_network"], as_root) if ARCH is not None else ""
    if not mode:
        status["warning"] = (
            "no namespaces (unprivileged user namespaces are disabled, or an unknown "
            "architecture): the candidate runs with the scorer's rights, confined by rlimits only"
        )
        _set_limits(job["limits"])
        if job["uid"] is not None:
            _drop_privileges(job["uid"])
            status["privileges_dropped"] = os.geteuid() == job["uid"]
        return status
    _die_with_parent(parent_alive)
    status.update(namespaces=mode, user_namespace=mode == "user", pid_namespace=True, ipc_namespace=True,
                  network_isolated=job["isolate_network"])
    outside_alive = _enter_pid_namespace()
    _libc.sethostname(b"sandbox", 7)
    _build_root(job["mounts"])
    status["filesystem"] = "private_root"
    status["proc_read_only"] = True
    if job["uid"] is not None:
        _drop_privileges(job["uid"])
        status["privileges_dropped"] = os.geteuid() == job["uid"]
    _set_limits(job["limits"])
    status["seccomp"] = status["nested_userns_blocked"] = _seccomp_filter()
    # the init is a new process, and the uid drop and user namespaces cleared the request
    _die_with_parent(lambda: _pipe_writer_alive(outside_alive))
    return status


def _open_report(path: str) -> int:
    """The scorer's pre-created confinement.json, opened while still privileged: after
    the drop, only this descriptor can write it (the file is root's, 0600)."""
    return os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)


def main() -> int:
    if sys.argv[1] == "--probe":  # sandbox.confinement_support: what this host allows
        mode = _enter_namespaces(True, os.geteuid() == 0) if ARCH is not None else ""
        print(json.dumps({"namespaces": mode}))
        return 0
    with open(sys.argv[1]) as handle:
        job = json.load(handle)
    report = _open_report(job["confinement_file"])
    try:
        status = confine(job)
    except OSError as err:  # the host refused a step: say which, run nothing
        print(f"chorus-sandbox: confinement failed, the candidate was not run: {err}", flush=True)
        return 125
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
