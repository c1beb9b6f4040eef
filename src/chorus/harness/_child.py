"""Sandbox child: confine this process, then run the cocotb stimulus (see sandbox.py).

Started as `python -m chorus.harness._child job.json` in the candidate's temp dir.
Everything before `runner.test` runs as the scorer's user; confinement is applied first,
so no candidate code ever runs unconfined.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000
GUARD_DIR = Path(__file__).resolve().parent / "guard"


def _isolate_network() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.unshare(CLONE_NEWNET) == 0


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


def _drop_privileges(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def confine(job: dict) -> dict:
    status = {"network_isolated": False, "privileges_dropped": False}
    if job["isolate_network"] and os.geteuid() == 0:
        status["network_isolated"] = _isolate_network()
    _set_limits(job["limits"])
    if job["uid"] is not None:
        _drop_privileges(job["uid"])
        status["privileges_dropped"] = os.geteuid() == job["uid"]
    return status


def main() -> int:
    job = json.loads(Path(sys.argv[1]).read_text())
    status = confine(job)
    Path("confinement.json").write_text(json.dumps(status))
    Path(sys.argv[1]).unlink()

    from cocotb_tools.runner import get_runner

    runner = get_runner("verilator")
    try:
        runner.test(
            test_module=job["module"],
            hdl_toplevel=job["toplevel"],
            hdl_toplevel_lang="verilog",
            build_dir=job["build_dir"],
            test_dir=os.getcwd(),
            seed=job["seed"],
            # the guard's sitecustomize is active only inside the simulator's Python
            extra_env={
                "PYTHONPATH": os.pathsep.join([str(GUARD_DIR), os.getcwd()]),
                "CHORUS_GUARD": "1",
            },
        )
    except SystemExit as exit_:
        return int(exit_.code or 0) if not isinstance(exit_.code, str) else 1
    except Exception as err:  # the runner's own failure: report it, don't hide it
        print(f"chorus-sandbox: simulator run failed: {err!r}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
