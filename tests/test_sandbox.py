"""Untrusted stimulus: every bad candidate gives a failed result with a reason, and the
scorer goes on. Each attack runs twice where it matters: with the in-process guard and
with the OS confinement alone (guard off), so each layer is shown to hold by itself."""

import os
import socket
from pathlib import Path

import pytest

from chorus.harness import SandboxLimits, score, score_many

AS_ROOT = os.geteuid() == 0
HEAD = """import cocotb, os, sys
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge

@cocotb.test()
async def attack(dut):
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    dut.rst.value = 1
    dut.en.value = 0
    await ClockCycles(dut.clk, 2)
"""


def run(task, cache, body, **limits):
    limits.setdefault("timeout_s", 15)
    return score(task, HEAD + body, cache_dir=cache, limits=SandboxLimits(**limits))


def assert_scorer_still_works(task, cache):
    assert score(task, task.reference_stimulus.read_text()).passed


def test_syntax_error(task, cache):
    result = score(task, "import cocotb\ndef broken(:\n")
    assert result.status == "syntax_error" and "line 2" in result.detail


def test_exception_is_runtime_error_with_message(task, cache):
    result = run(task, cache, "    raise ValueError('boom in stimulus')\n")
    assert result.status == "runtime_error" and "boom in stimulus" in result.detail


def test_no_test_in_module(task, cache):
    result = score(task, "x = 1\n")
    assert result.status == "runtime_error" and not result.passed


@pytest.mark.parametrize(
    "body",
    ["    while True:\n        pass\n", "    while True:\n        await RisingEdge(dut.clk)\n"],
    ids=["busy-loop", "endless-simulation"],
)
def test_hang_times_out(task, cache, body):
    result = run(task, cache, body, timeout_s=4)
    assert result.status == "timeout" and not result.passed
    assert result.sim_time_s < 10
    assert_scorer_still_works(task, cache)


def test_ten_gigabytes_is_a_memory_failure(task, cache):
    result = run(task, cache, "    blob = bytearray(10 * 1024**3)\n", mem_mb=2048)
    assert result.status == "memory"


def test_printing_gigabytes_is_stopped(task, cache):
    result = run(task, cache, "    line = 'x' * 1000000\n    while True:\n        print(line)\n", fsize_mb=8)
    assert result.status == "output_limit"
    assert_scorer_still_works(task, cache)


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])
def test_shell_command_cannot_touch_the_host(task, cache, guard, tmp_path):
    marker = Path("/tmp") / f"chorus-pwned-{os.getpid()}-{guard}"
    result = run(task, cache, f"    os.system('touch {marker}')\n", guard=guard)
    assert not marker.exists()
    if guard:
        assert result.status == "runtime_error" and "os.system" in result.detail


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])
@pytest.mark.parametrize("target", ["/tmp", "repo", "/run/lock", "/dev/shm"])
def test_writing_outside_the_temp_dir_fails(task, cache, guard, target):
    folder = Path(__file__).parent if target == "repo" else Path(target)
    if not folder.is_dir():
        pytest.skip(f"no {folder} here")
    victim = folder / f"chorus-written-{os.getpid()}-{guard}.txt"
    result = run(task, cache, f"    open({str(victim)!r}, 'w').write('x')\n", guard=guard)
    try:
        assert not victim.exists()
        assert result.status == "runtime_error"
    finally:
        victim.unlink(missing_ok=True)


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])
def test_forged_coverage_database_scores_nothing(task, cache, guard):
    """A stimulus that writes its own coverage.dat (and write-protects it so the simulator
    cannot replace it) gains nothing: the guard refuses the write, and without the guard
    the scorer counts only points the compiled design declares (the build's universe)."""
    fake = "# SystemC::Coverage-3\nC '\x01page\x02v_line/fx_counter\x01l\x02999' 5\n"
    body = (
        f"    open('forged.tmp', 'w').write({fake!r})\n"
        "    os.chmod('forged.tmp', 0o444)\n"
        "    os.replace('forged.tmp', 'coverage.dat')\n"
    )
    # (a write-protected coverage.dat makes the simulator's final write fail and hang)
    result = run(task, cache, body, guard=guard, timeout_s=6)
    assert not result.passed and result.score < 1
    assert result.coverage.get("line", 0.0) < 1.0
    if guard:
        assert result.status == "runtime_error" and "read-only" in result.detail


@pytest.mark.skipif(not AS_ROOT, reason="reading root's files is only refused by the uid drop")
@pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])
def test_reading_ssh_keys_fails(task, cache, guard):
    ssh = Path("/root/.ssh")
    created_dir = not ssh.exists()
    ssh.mkdir(mode=0o700, exist_ok=True)
    key = ssh / "chorus_test_key"
    key.write_text("SECRET-KEY")
    key.chmod(0o600)
    try:
        result = run(task, cache, f"    print(open({str(key)!r}).read())\n", guard=guard)
        assert result.status == "runtime_error" and "Permission denied" in result.detail
        assert "SECRET-KEY" not in result.detail
    finally:
        key.unlink()
        if created_dir:
            ssh.rmdir()


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])
def test_no_network(task, cache, guard):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    body = f"    import socket\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).send(b'leak')\n"
    try:
        result = run(task, cache, body, guard=guard)
        assert result.status == "runtime_error"
        if AS_ROOT:
            with pytest.raises(socket.timeout):
                server.accept()
    finally:
        server.close()


@pytest.mark.skipif(not AS_ROOT, reason="the process limit binds only after the uid drop")
@pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])
def test_fork_bomb_is_contained(task, cache, guard):
    result = run(task, cache, "    while True:\n        os.fork()\n", guard=guard, timeout_s=5)
    assert not result.passed and result.status in ("runtime_error", "timeout")
    assert_scorer_still_works(task, cache)


@pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])
def test_killing_the_parent_spares_the_scorer(task, cache, guard):
    body = "    import signal\n    os.kill(os.getppid(), signal.SIGKILL)\n    os.killpg(0, signal.SIGKILL)\n"
    result = run(task, cache, body, guard=guard)
    assert not result.passed
    assert_scorer_still_works(task, cache)  # this test process is the scorer


def test_batch_with_bad_candidates_loses_no_result(task, cache):
    ref = task.reference_stimulus.read_text()
    items = [
        (task, ref),
        (task, HEAD + "    while True:\n        pass\n"),
        (task, HEAD + "    raise RuntimeError('x')\n"),
        (task, "not python at all ("),
        (task, ref),
    ]
    results = score_many(items, workers=2, limits=SandboxLimits(timeout_s=4))
    assert [r.status for r in results] == ["ok", "timeout", "runtime_error", "syntax_error", "ok"]
