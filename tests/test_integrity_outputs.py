"""The reward comes from a replay of the candidate's recorded inputs (Run 2, no candidate
code): nothing the candidate writes in its own run (Run 1) can be read as coverage or as
`passed`, and the scorer (often root) must not be hung, exhausted or misled by the paths
of a run.

Each attack runs against real Verilator, with the audit-hook guard and without it (the
guard is not the boundary). The attack stimuli drive nothing, so an honest run of them
scores 0: any score above 0 would be forged.
"""

import os
import stat
from pathlib import Path

import pytest

from chorus.harness import SandboxLimits, score, score_many
from chorus.harness.outputs import OversizedOutput, read_bounded, read_tail
from chorus.harness.sandbox import confinement_support
from conftest import run_bounded

AS_ROOT = os.geteuid() == 0
GUARD = pytest.mark.parametrize("guard", [True, False], ids=["guard", "os-only"])

# Helpers the attacks share, run inside the simulator's Python: where the run's outputs
# go, and a coverage database that claims every point the compiled design declares.
QUIET_HEAD = """import cocotb, json, os, sys
from cocotb.triggers import Timer

def trace_path():  # the file Run 1 writes for the scorer: the recorded inputs
    args = open('/proc/self/cmdline', 'rb').read().decode().split(chr(0))
    return args[args.index('--chorus-record') + 1]

def coverage_path():  # where a coverage file would go: beside the trace, in the output folder
    return os.path.join(os.path.dirname(trace_path()), 'coverage.dat')

def forged_trace():  # a trace that ended normally and drives nothing
    return 'chorus-inputs 1 3' + chr(10) + 'end 5' + chr(10)

def forged_coverage():
    build = os.path.dirname(os.readlink('/proc/self/exe'))
    universe = json.load(open(os.path.join(build, 'points.json')))
    lines = ['# SystemC::Coverage-3']
    lines += ["C '" + chr(1) + point + "' 9" for ids in universe.values() for point in ids]
    return chr(10).join(lines) + chr(10)

PASSING_RESULTS = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="all" tests="1" '
    'failures="0" errors="0"><testcase name="attack" classname="stimulus"/></testsuite></testsuites>'
)

@cocotb.test()
async def attack(dut):
    dut.rst.value = 1
    dut.en.value = 0
    await Timer(5, unit="ns")
"""


def attack(task, body: str, **limits) -> "SimResult":  # noqa: F821
    limits.setdefault("timeout_s", 20)
    return score(task, QUIET_HEAD + body, limits=SandboxLimits(**limits))


def assert_nothing_gained(result):
    assert not result.passed and result.status != "ok"
    assert result.score == 0.0
    assert all(value == 0.0 for metric, value in result.coverage.items() if metric in ("line", "branch"))


def test_quiet_stimulus_honestly_scores_zero(task):
    """The baseline of every attack below: the same stimulus without the attack."""
    result = attack(task, "")
    assert result.status == "below_target" and result.score == 0.0


# -- forged coverage ----------------------------------------------------------------------
# guard on: sqlite3 writes the file without the audited `open` event (the text of a row
# lies in the database file as it is, so the coverage lines are there to parse)
SQLITE_WRITE = """    import sqlite3
    db = sqlite3.connect(TARGET)
    db.execute('PRAGMA page_size = 65536')
    db.execute('CREATE TABLE t (x TEXT)')
    db.execute('INSERT INTO t VALUES (?)', (chr(10) + forged_coverage(),))
    db.commit()
    db.close()
"""
OS_WRITE = """    fd = os.open(TARGET, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o444)
    os.write(fd, forged_coverage().encode())
    os.close(fd)
"""


@GUARD
def test_coverage_forged_in_the_work_folder_is_ignored(task, guard):
    """Write a perfect coverage.dat into the candidate's folder by a route the guard does
    not see, then change directory so that the simulator's own write (once relative to
    the cwd) would land elsewhere: the scorer reads only the simulator's absolute path."""
    body = "    TARGET = 'coverage.dat'\n" + (SQLITE_WRITE if guard else OS_WRITE)
    body += "    os.mkdir('elsewhere')\n    os.chdir('elsewhere')\n"
    assert_nothing_gained(attack(task, body, guard=guard))


@pytest.mark.skipif(not AS_ROOT, reason="the output folder is protected by the uid drop")
@GUARD
def test_output_files_cannot_be_replaced_or_write_protected(task, guard):
    """Every way to keep the simulator's final write out of the output file fails:
    pre-creating, symlinking, renaming, removing, chmod-ing it or the folder; bytes the
    candidate writes into it (without the guard) are truncated by the simulator's write.
    The confinement report and the job are root's alone."""
    body = """    cov = trace_path()
    out = os.path.dirname(cov)
    attempts = {
        'chmod file': lambda: os.chmod(cov, 0o444),
        'chmod folder': lambda: os.chmod(out, 0o777),
        'unlink': lambda: os.unlink(cov),
        'rename away': lambda: os.rename(cov, cov + '.old'),
        'rename over': lambda: (open('forged', 'w').write(forged_coverage()), os.rename('forged', cov)),
        'symlink in out': lambda: os.symlink(os.path.abspath('forged'), out + '/coverage.dat'),
        'fifo in out': lambda: os.mkfifo(out + '/fifo'),
        'new file in out': lambda: open(out + '/new', 'w'),
        'rename out': lambda: os.rename(out, out + '.old'),
        'chmod results': lambda: os.chmod(os.environ['COCOTB_RESULTS_FILE'], 0o444),
        'write confinement report': lambda: open(out + '/confinement.json', 'w'),
        'read job': lambda: open(out + '/job.json').read(),
    }
    allowed = []
    for name, attempt in attempts.items():
        try:
            attempt()
            allowed.append(name)
        except OSError:
            pass
    assert not allowed, f'allowed: {allowed}'
    try:
        with open(cov, 'w') as handle:  # refused by the guard; allowed by the OS (0622)
            handle.write(forged_trace())
    except OSError:
        pass
"""
    result = attack(task, body, guard=guard)
    assert result.status == "below_target", result.detail  # every attempt above failed
    assert_nothing_gained(result)


@GUARD
def test_ending_before_the_simulator_writes_scores_nothing(task, guard):
    """Write a perfect coverage file, a passing report and a trace cut short, then end
    the process before the simulator's own end: a run that did not end normally scores 0,
    and no coverage file of Run 1 is ever read."""
    body = """    for path, text in ((coverage_path(), forged_coverage()), ('coverage.dat', forged_coverage()),
                       (os.environ['COCOTB_RESULTS_FILE'], PASSING_RESULTS)):
        try:
            with open(path, 'w') as handle:
                handle.write(text)
        except OSError:
            pass
    os._exit(0)
"""
    result = attack(task, body, guard=guard)
    assert result.status == "runtime_error", result.detail
    assert result.coverage == {}
    assert_nothing_gained(result)


# -- the attack classes of issue 32: each once got `ok`, passed, score 1.0 ----------------
# The file writes go through sqlite3 (a C library's own open: no audit event) with the
# guard, through os.open without it.
def _unaudited_write(target: str, text: str, guard: bool) -> str:
    if guard:
        return f"""    import sqlite3
    db = sqlite3.connect({target})
    db.execute('CREATE TABLE t (x TEXT)')
    db.execute('INSERT INTO t VALUES (?)', (chr(10) + {text},))
    db.commit()
    db.close()
"""
    return f"""    fd = os.open({target}, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, ({text}).encode())
    os.close(fd)
"""


@GUARD
def test_unaudited_writes_then_an_early_end_score_nothing(task, guard):
    """Class 1: write the scored files through a call that raises no audit event (a
    perfect coverage file where the simulator would write it, a passing report, a trace
    that claims a normal end) and end the process before the simulator's final write.
    The forged trace is only a stimulus: replayed, it drives nothing and reaches
    nothing; the claim of a passing test is not `passed`."""
    body = _unaudited_write("coverage_path()", "forged_coverage()", guard)
    body += _unaudited_write("trace_path()", "forged_trace()", guard)
    body += "    open(os.environ['COCOTB_RESULTS_FILE'], 'w').write(PASSING_RESULTS)\n    os._exit(0)\n"
    result = attack(task, body, guard=guard)
    assert result.status in ("runtime_error", "below_target"), result.detail
    assert_nothing_gained(result)


@GUARD
def test_a_helper_appending_after_the_final_write_scores_nothing(task, guard):
    """Class 2: start a helper (a forked child without the guard; with it, every spawning
    route the guard knows is refused) that waits for the simulator's final write and then
    appends a full point list to the coverage file and steps to the trace. The pid
    namespace kills the helper with the simulator, Run 1 writes no coverage, and a step
    after the trace's end is refused."""
    body = """    def helper():
        import time
        time.sleep(0.5)
        for path, text in ((coverage_path(), forged_coverage()), (trace_path(), '0 0:1 1:1 2:1' + chr(10))):
            with open(path, 'a') as handle:
                handle.write(text)
        os._exit(0)
    try:
        if os.fork() == 0:
            helper()
    except Exception:
        pass
"""
    results = [attack(task, body, guard=guard) for _ in range(3)]
    for result in results:
        assert result.status in ("below_target", "runtime_error"), result.detail
        assert_nothing_gained(result)


# -- forged test results ------------------------------------------------------------------
@GUARD
def test_forged_results_do_not_pass_a_failing_test(task, guard):
    """Pre-create a passing results.xml in the work folder and write-protect it (cocotb
    once wrote there, and failed), and write one into the real results file: cocotb's
    final write replaces it, and the failing test is reported."""
    body = """    with open('results.xml', 'w') as handle:
        handle.write(PASSING_RESULTS)
    os.chmod('results.xml', 0o444)
    with open(os.environ['COCOTB_RESULTS_FILE'], 'w') as handle:
        handle.write(PASSING_RESULTS)
    try:
        os.chmod(os.environ['COCOTB_RESULTS_FILE'], 0o444)
    except OSError:
        pass
    raise AssertionError('the stimulus own check failed')
"""
    result = attack(task, body, guard=guard)
    assert result.status == "runtime_error"
    if AS_ROOT:  # cocotb's own report, not refused: without the uid drop the chmod works,
        assert "own check failed" in result.detail  # the scorer refuses the changed file
    assert_nothing_gained(result)


@GUARD
def test_results_rewritten_at_exit_are_the_candidates_claim(task, guard):
    """The test outcome is reported by cocotb inside the candidate's process, so code
    there can rewrite it (here at interpreter exit, after cocotb's write): it is kept as
    `claimed_pass` only; the score and `passed` come from the replay."""
    body = """    import atexit
    def rewrite():
        with open(os.environ['COCOTB_RESULTS_FILE'], 'w') as handle:
            handle.write(PASSING_RESULTS)
    atexit.register(rewrite)
    raise AssertionError('the stimulus own check failed')
"""
    result = attack(task, body, guard=guard)
    assert result.claimed_pass is True
    assert_nothing_gained(result)


# -- the scorer opens no candidate-controlled path ---------------------------------------
REPLACE_OUTPUTS = """    out = os.path.dirname(trace_path())
    drop = lambda path: os.path.lexists(path) and os.unlink(path)
    for name in ('sim.log', 'results.xml', 'inputs.trace', 'confinement.json'):
        path = os.path.join(out, name)
        try:
{make}
            print(f'replaced {{name}}', flush=True)
        except OSError as err:  # (with namespaces: the output folder is read-only)
            print(f'refused {{name}}: {{err.strerror}}', flush=True)
    print('replaced the outputs', flush=True)
    os._exit(0)
"""
REPLACEMENTS = {
    "fifo": "            drop(path)\n            os.mkfifo(path)",
    "symlink-to-secret": "            drop(path)\n            os.symlink(SECRET, path)",
    "dev-zero": "            drop(path)\n            os.symlink('/dev/zero', path)",
    # the file itself grown (sparse) to just below the file-size limit
    "huge-file": "            open(path, 'a').close()\n            os.truncate(path, 60 * 2**20)",
}


def replacing_attack(kind: str, secret: Path) -> str:
    return f"    SECRET = {str(secret)!r}\n" + REPLACE_OUTPUTS.format(make=REPLACEMENTS[kind])


@pytest.mark.parametrize("kind", list(REPLACEMENTS))
def test_scorer_reads_no_path_the_candidate_replaced(task, kind, secret):
    """A candidate that runs as the scorer's own user (no uid drop: here root without
    `drop_privileges`, or any non-root scorer) tries to replace every output file of its
    run with a FIFO, a symlink to a secret or to /dev/zero, or grow it to a sparse file
    near the size limit. With namespaces the output folder is read-only in its root (the
    files it writes are single writable mounts, which cannot be unlinked): the log and
    the confinement report are refused, the written files can only be grown. Without
    namespaces every replacement succeeds. Either way the scorer reads the files it
    created through the descriptors it kept: no hang, no secret in the detail, no
    unbounded read."""
    limits = SandboxLimits(timeout_s=20, guard=False, drop_privileges=False)
    stimulus = QUIET_HEAD + replacing_attack(kind, secret)
    result = run_bounded(lambda: score(task, stimulus, limits=limits), timeout_s=120)
    assert result.status == "runtime_error" and "replaced the outputs" in result.detail
    assert "SECRET" not in result.detail
    assert_nothing_gained(result)
    if confinement_support().get("namespaces"):
        assert "refused sim.log" in result.detail and "refused confinement.json" in result.detail, result.detail


def test_batch_with_output_attacks_keeps_the_other_results(task, secret):
    """Hostile candidates in one parallel batch leave the good candidates' results as they
    are, and the batch ends."""
    reference = task.reference_stimulus.read_text()
    items = [
        (task, reference),
        (task, QUIET_HEAD + replacing_attack("fifo", secret)),
        (task, QUIET_HEAD + "    TARGET = 'coverage.dat'\n" + OS_WRITE + "    os.chdir('/')\n"),
        (task, QUIET_HEAD + replacing_attack("symlink-to-secret", secret)),
        (task, reference),
    ]
    limits = SandboxLimits(timeout_s=20, guard=False, drop_privileges=False)
    results = run_bounded(lambda: score_many(items, workers=2, limits=limits), timeout_s=300)
    assert [r.status for r in results] == ["ok", "runtime_error", "below_target", "runtime_error", "ok"]
    assert [r.score for r in results] == [1.0, 0.0, 0.0, 0.0, 1.0]


# -- the bounded reader itself ------------------------------------------------------------
def test_bounded_reads_refuse_fifos_devices_and_huge_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as handle:
        handle.truncate(10**12)
    small = tmp_path / "small"
    small.write_bytes(b"0123456789")
    for path in (fifo, "/dev/zero"):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert not stat.S_ISREG(os.fstat(fd).st_mode)
            with pytest.raises(OversizedOutput):
                read_bounded(fd, 1024)
            assert read_tail(fd, 1024) == b""
        finally:
            os.close(fd)
    fd = os.open(sparse, os.O_RDONLY)
    try:
        with pytest.raises(OversizedOutput):
            read_bounded(fd, 1 << 20)
        assert len(read_tail(fd, 100)) == 100
    finally:
        os.close(fd)
    fd = os.open(small, os.O_RDONLY)
    try:
        assert read_bounded(fd, 10) == b"0123456789"
        with pytest.raises(OversizedOutput):
            read_bounded(fd, 9)
        assert read_tail(fd, 4) == b"6789"
    finally:
        os.close(fd)
