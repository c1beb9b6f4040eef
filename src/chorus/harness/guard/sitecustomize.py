"""Loaded by the simulator's embedded Python for candidate stimulus (CHORUS_GUARD=1).

A second line of defence inside the process that runs untrusted code, beside the OS
confinement of sandbox.py: audit hooks (which cannot be removed once installed) refuse
starting programs, sockets, ctypes, and touching the coverage database the score is
read from. It is not a security boundary on its own (see docs/harness.md).
"""

import os
import sys

if os.environ.get("CHORUS_GUARD") == "1":
    _BLOCKED_EVENTS = {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "os.kill",
        "os.killpg",
        "subprocess.Popen",
        "pty.spawn",
        "socket.socket",
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "ctypes.dlopen",
        "ctypes.dlsym",
        "ctypes.cdata",
        "os.symlink",
        "os.link",
    }
    _PATH_EVENTS = {
        "open",
        "os.remove",
        "os.rename",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.utime",
        "shutil.rmtree",
        "shutil.move",
        "shutil.copyfile",
    }
    # what the score is read from: written by the simulator and cocotb, never by stimulus
    # (results.xml is not listed: cocotb writes it from this very process at the end)
    _PROTECTED = ("coverage.dat", "confinement.json")
    # cocotb writes its results there, outside the work folder (sandbox.py, outputs.py)
    _RESULTS_FILE = os.path.realpath(os.environ.get("COCOTB_RESULTS_FILE") or os.devnull)

    def _protected(path):
        name = os.path.basename(os.path.normpath(os.fsdecode(path)))
        return name in _PROTECTED

    _HOME = os.path.realpath(os.getcwd())
    _WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

    def _writes_outside_home(args):
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if not isinstance(path, (str, bytes)):
            return False  # an already open file descriptor
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        target = os.path.realpath(os.fsdecode(path))
        inside = target == _HOME or target.startswith(_HOME + os.sep) or target == _RESULTS_FILE
        return bool(writing) and not inside

    def _guard(event, args):
        if event in _BLOCKED_EVENTS:
            raise PermissionError(f"chorus sandbox: {event} is not allowed in stimulus")
        if event in _PATH_EVENTS and args:
            # every path argument: os.rename/os.replace("forged", "coverage.dat") too
            for arg in args[:2]:
                if isinstance(arg, (str, bytes, os.PathLike)) and _protected(arg):
                    raise PermissionError("chorus sandbox: the simulator's result files are read-only")
        if event == "open" and args and isinstance(args[0], int):
            pass  # an already open descriptor
        elif event == "open" and _writes_outside_home(args):
            raise PermissionError(f"chorus sandbox: writing outside the work folder: {args[0]}")
        if event == "import" and args and args[0] in ("ctypes", "_ctypes"):
            raise PermissionError("chorus sandbox: ctypes is not allowed in stimulus")

    sys.addaudithook(_guard)
