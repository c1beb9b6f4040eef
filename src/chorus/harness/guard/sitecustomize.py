"""Loaded by the simulator's embedded Python for candidate stimulus (CHORUS_GUARD set).

A second line of defence inside the process that runs untrusted code, beside the OS
confinement of sandbox.py: audit hooks (which cannot be removed once installed) refuse
starting programs, sockets, ctypes, and touching the coverage database the score is
read from. It is not a security boundary on its own (see docs/harness.md).

It refuses what the candidate does, not what the Python environment does while it
starts: until the first code from the candidate's folder (the cwd) executes, only
cocotb, pytest, their plugins and this guard have run (a pytest plugin may import numpy,
which imports ctypes), and events are refused only when a frame of the candidate's
folder is on the stack. From the moment the candidate's code starts (an `exec` of a code
object from its folder) every listed event is refused, whoever calls: after that,
library code may be running on the candidate's behalf (a callback it scheduled). At that
moment ctypes is also dropped from sys.modules, so importing it goes through the audited
import again, and every `ctypes.*` event (loading, symbol look-up, calls, raw memory) is
refused.

CHORUS_GUARD=from_start refuses from the first event (the behaviour before the above,
kept so tests can show what it broke).

The garbage collector is off while the environment starts (importing cocotb and pytest
makes tens of thousands of objects, which the collector would traverse again and
again) and comes back, with those objects frozen out of its passes (gc.freeze), as the
candidate's code starts: the candidate runs with the collector as usual.
"""

import os
import sys


# The rules below are built by factories at install time and live on only in the hook's
# closures: the factories are deleted from the module afterwards, and nothing the hook
# calls is looked up by a module-level name the candidate could rebind.
def _event_rules():
    """(events refused outright, events whose path arguments are checked, the result
    files nobody may touch, the ctypes modules)."""
    blocked_events = frozenset({
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
        "os.symlink",
        "os.link",
        # the way to the guard's own state once the candidate runs
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
    })
    path_events = frozenset({
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
    })
    # what the score is read from: written by the simulator and cocotb, never by stimulus
    # (results.xml is not listed: cocotb writes it from this very process at the end)
    protected = ("coverage.dat", "confinement.json")
    return blocked_events, path_events, protected, ("ctypes", "_ctypes")


def _path_rules(homes, protected, results_file):
    """(in_home, is_protected, writes_outside_home): where a path lies, for the work
    folders `homes` and the results file cocotb writes outside them."""
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

    def in_home(path):
        if not isinstance(path, (str, bytes)):
            return False
        path = os.fsdecode(path)
        if path.startswith("<"):  # "<frozen ...>", "<string>": code without a file
            return False
        path = os.path.abspath(path)
        return any(path == home or path.startswith(home + os.sep) for home in homes)

    def is_protected(path):
        return os.path.basename(os.path.normpath(os.fsdecode(path))) in protected

    def writes_outside_home(args):
        path, mode, flags = (list(args) + [None, None, None])[:3]
        if not isinstance(path, (str, bytes)):
            return False  # an already open file descriptor
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & write_flags
        )
        if not writing:
            return False
        target = os.path.realpath(os.fsdecode(path))
        inside = any(target == h or target.startswith(h + os.sep) for h in homes)
        return not (inside or target == results_file)

    return in_home, is_protected, writes_outside_home


def _refusal_rule(blocked_events, path_events, ctypes_modules, is_protected, writes_outside_home):
    def refusal(event, args):
        """Why `event` is refused in candidate code, or None."""
        if event in blocked_events or event.startswith("ctypes."):
            return f"{event} is not allowed in stimulus"
        if event in path_events and args:
            # every path argument: os.rename/os.replace("forged", "coverage.dat") too
            for arg in args[:2]:
                if isinstance(arg, (str, bytes, os.PathLike)) and is_protected(arg):
                    return "the simulator's result files are read-only"
        if event == "open" and args and not isinstance(args[0], int) and writes_outside_home(args):
            return f"writing outside the work folder: {args[0]}"
        if event == "import" and args and args[0] in ctypes_modules:
            return "ctypes is not allowed in stimulus"
        return None

    return refusal


def _install(mode):
    import gc  # a local: start_candidate looks up nothing the candidate could rebind

    blocked_events, path_events, protected, ctypes_modules = _event_rules()
    homes = tuple({os.getcwd(), os.path.realpath(os.getcwd())})
    state = {"candidate_started": mode == "from_start"}
    # cocotb writes its results there, outside the work folder (sandbox.py, outputs.py)
    results_file = os.path.realpath(os.environ.get("COCOTB_RESULTS_FILE") or os.devnull)
    in_home, is_protected, writes_outside_home = _path_rules(homes, protected, results_file)
    refusal = _refusal_rule(blocked_events, path_events, ctypes_modules, is_protected, writes_outside_home)

    def candidate_on_stack():
        frame = sys._getframe(2)
        while frame is not None:
            if in_home(frame.f_code.co_filename):
                return True
            frame = frame.f_back
        return False

    def start_candidate():
        state["candidate_started"] = True
        gc.freeze()
        gc.enable()
        for name in list(sys.modules):
            if name.split(".", 1)[0] in ctypes_modules:
                del sys.modules[name]

    def guard(event, args):
        if not state["candidate_started"]:
            if event == "exec" and args and in_home(getattr(args[0], "co_filename", None)):
                start_candidate()  # the candidate's first code is about to run
            else:
                reason = refusal(event, args)
                if reason is None or not candidate_on_stack():
                    return  # the environment starting up (cocotb, pytest plugins)
                raise PermissionError(f"chorus sandbox: {reason}")
        reason = refusal(event, args)
        if reason is not None:
            raise PermissionError(f"chorus sandbox: {reason}")

    if not state["candidate_started"]:
        gc.disable()  # until start_candidate
    sys.addaudithook(guard)


if os.environ.get("CHORUS_GUARD") in ("1", "from_start"):
    _install(os.environ["CHORUS_GUARD"])
del _install, _event_rules, _path_rules, _refusal_rule
