"""The failure class of issue 13: a Python environment whose pytest plugin imports ctypes.

cocotb, by default, configures pytest (assertion rewriting) in the simulator's Python
before it imports the test module, and pytest then imports every `pytest11` entry point
it finds (the harness now turns that off: the stimulus comes with its asserts
rewritten, cocotb_run.stimulus_bytecode; force_old_guard turns it on again).
On ML images such a plugin (jaxtyping's, for one) imports numpy, which imports ctypes.
This builds such a package in a world-readable temp folder, as a path entry holding the
plugin module and its dist-info, without installing anything into the shared venv. The
simulator's Python sees only cocotb and the distributions it requires (the sandbox's
mount plan and PYTHONPATH): `foreign_python_env` makes the plugin one of them, as it
would be on an image where a requirement of cocotb brings such a plugin.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path

PLUGIN = "chorus_probe_plugin"
PLUGIN_SOURCE = '''"""A well-behaved pytest plugin that loads native code when imported."""
import ctypes  # noqa: F401

try:
    import numpy  # noqa: F401  (numpy imports ctypes too)
except ImportError:
    pass

LOADED = True
'''


def make_plugin_path_entry(parent: str | Path | None = None) -> Path:
    """A folder that is a path entry with the plugin package installed in it."""
    entry = Path(tempfile.mkdtemp(prefix="chorus-foreign-env-", dir=parent))
    entry.chmod(0o755)  # the sandbox user reads it
    (entry / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    dist = entry / f"{PLUGIN}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[pytest11]\nchorus_probe = {PLUGIN}\n")
    # the installed files (how the sandbox finds what to bind of a distribution)
    (dist / "RECORD").write_text("".join(f"{name},,\n" for name in (
        f"{PLUGIN}.py", *(f"{dist.name}/{n}" for n in ("METADATA", "entry_points.txt", "RECORD")))))
    for path in (entry, dist, *entry.iterdir(), *dist.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return entry


def _forget_simulator_packages(sandbox) -> None:
    sandbox._simulator_packages.cache_clear()
    sandbox._environment_plan.cache_clear()


@contextlib.contextmanager
def foreign_python_env():
    """The plugin package on this process's sys.path and among the distributions the
    simulator's Python sees (SIMULATOR_DISTRIBUTIONS)."""
    from chorus.harness import sandbox

    entry = make_plugin_path_entry()
    sys.path.insert(0, str(entry))
    distributions = sandbox.SIMULATOR_DISTRIBUTIONS
    sandbox.SIMULATOR_DISTRIBUTIONS = (*distributions, PLUGIN)
    _forget_simulator_packages(sandbox)
    try:
        yield entry
    finally:
        sandbox.SIMULATOR_DISTRIBUTIONS = distributions
        _forget_simulator_packages(sandbox)
        sys.path.remove(str(entry))
        shutil.rmtree(entry, ignore_errors=True)


def force_old_guard(monkeypatch) -> None:
    """Make the sandbox start the simulator's Python as it did before issue 13: the guard
    refusing from the first event, the environment's own start included, and cocotb
    configuring pytest for its assertion rewriting (which imports every pytest11
    plugin; today the stimulus comes with its asserts rewritten and no plugin loads)."""
    from chorus.harness import cocotb_run

    original = cocotb_run.simulator_command

    def from_start(*args, **kwargs):
        argv, env = original(*args, **kwargs)
        if "CHORUS_GUARD" in env:
            env["CHORUS_GUARD"] = "from_start"
        env.pop("COCOTB_REWRITE_ASSERTION_FILES", None)  # cocotb's default: configure pytest
        return argv, env

    monkeypatch.setattr(cocotb_run, "simulator_command", from_start)
