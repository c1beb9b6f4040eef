"""Soak test of the scorer: thousands of candidates, good, bad and hostile, through the
evaluation path (chorus.harness.score.score_generations: sandboxes in parallel, one
result row per sample appended to a `.partial` sidecar, the table written at the end).

  python benchmarks/soak.py                      # 2,000 candidates, ~12 min on 2 cores
  python benchmarks/soak.py --candidates 200     # a quick look
  python benchmarks/soak.py --language systemverilog   # testbench answers (CVDP style), ~65 min

cocotb (the default): the mix is deterministic (seeded) over eight ECov tasks and the test
fixture fx_counter: reference stimuli (must pass), trivial stimuli (below target), syntax
errors, exceptions, busy loops, endless simulations, 10 GB allocations, output floods,
fork loops, modules without a test.
systemverilog: SystemVerilog testbenches (harness/svtb.py: Run 1 records the instance's
inputs, Run 2 replays them) over fx_counter as a testbench task and CVDP's example row:
good testbenches (must pass), trivial ones, syntax errors, $fatal and $error endings, no
instance `uut`, no $finish with a clock running, a zero-time loop, $display floods, a
huge dynamic array, a growing queue, parameter overrides, defparam, chorus_ names,
$system and $fopen forging the scored files.
Checks, each failing the run (exit 1) when it does not hold: every candidate has exactly
one result in the table on disk; every good candidate passes and every bad one fails with
the status its kind must give; no process of a sandbox uid and no candidate folder
outlives the run. Reports wall time, candidates/s, per-status counts, median simulation
seconds per kind, and peak memory of the scorer and of its children. Writes
benchmarks/results/soak.json (soak_systemverilog.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import date
from pathlib import Path
from typing import NamedTuple

from chorus.harness import SandboxLimits
from chorus.cvdp import convert_cvdp_jsonl
from chorus.harness.sandbox import (
    RUN_PREFIX,
    SANDBOX_UID_BASE,
    SLOT_COUNT,
    SLOT_DIR,
    TRASH_DIR,
    processes_of_uid,
)
from chorus.harness.score import default_workers, score_generations
from chorus.prompts import FENCE_TAGS, extract_answer
from chorus.tasks import Task, load_task, load_tasks

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
FIXTURE_TASK = REPO / "tests" / "fixtures" / "tasks" / "fx_counter"
CVDP_EXAMPLE = (REPO / "tests" / "fixtures" / "cvdp"
                / "cvdp_v1.1.0_example_nonagentic_code_generation_commercial_with_solutions.jsonl")
SOAK_TASKS = ("up_counter", "fifo_sync", "edge_detector", "sipo_shift", "gray_codec", "prio_encoder", "uart_tx", "alu8")


class Kind(NamedTuple):
    share: float  # of the mix
    # the stimulus, or a function of the task that writes it; None: the task's own
    # reference / trivial file
    body: str | Callable[[Task], str] | None
    expected: str  # the status every candidate of this kind must get


HEADER = "import cocotb, os\nfrom cocotb.triggers import Timer\n\n@cocotb.test()\nasync def soak(dut):\n"
KINDS: dict[str, Kind] = {
    "reference": Kind(0.40, None, "ok"),
    "trivial": Kind(0.14, None, "below_target"),
    "syntax_error": Kind(0.08, "def broken(:\n", "syntax_error"),
    "exception": Kind(0.08, HEADER + "    raise RuntimeError('candidate gave up')\n", "runtime_error"),
    "busy_loop": Kind(0.04, HEADER + "    while True:\n        pass\n", "timeout"),
    # awaits forever: simulated time advances, wall time runs out
    "endless_sim": Kind(0.04, HEADER + "    while True:\n        await Timer(1, unit='ns')\n", "timeout"),
    "memory_hog": Kind(0.06, HEADER + "    blob = bytearray(10 * 1024**3)\n", "memory"),
    "output_flood": Kind(0.05, HEADER + "    line = 'x' * 100000\n    while True:\n        print(line)\n",
                         "output_limit"),
    "fork": Kind(0.06, HEADER + "    while True:\n        os.fork()\n", "runtime_error"),
    "no_test": Kind(0.05, "x = 1\n", "runtime_error"),
}


def soak_tasks() -> list[Task]:
    """The ECov tasks of SOAK_TASKS, then the fixture task fx_counter."""
    tasks = {t.id: t for t in load_tasks()}
    missing = [name for name in SOAK_TASKS if name not in tasks]
    if missing:  # a silently smaller mix would make runs incomparable
        raise SystemExit(f"soak tasks missing from tasks/ecov: {missing}")
    return [*(tasks[name] for name in SOAK_TASKS), load_task(FIXTURE_TASK)]


# -- SystemVerilog testbench answers -----------------------------------------------------
# a testbench per design, around one `initial` block ({body}) with declarations before it
# ({extra}); the design instantiated as `uut`, as the scorer demands
SV_TESTBENCHES = {
    "fx_counter": """`timescale 1ns/1ps
module soak_tb;
  logic clk = 0, rst = 1, en = 0;
  wire [3:0] q;
  wire wrap;
  fx_counter uut (.clk(clk), .rst(rst), .en(en), .q(q), .wrap(wrap));
  always #5 clk = ~clk;
{extra}  initial begin
{body}  end
endmodule
""",
    "gf_multiplier": """`timescale 1ns/1ps
module soak_tb;
  reg [3:0] A = 4'h0, B = 4'h0;
  wire [3:0] result;
  gf_multiplier uut (.A(A), .B(B), .result(result));
{extra}  initial begin
{body}  end
endmodule
""",
}
# fx_counter's good testbench: out of reset, a full wrap, enable off, reset again: every
# line and branch (the task's target)
COUNTER_GOOD_BODY = """    @(posedge clk); rst = 0; en = 1;
    repeat (20) @(posedge clk);
    en <= 0;
    repeat (2) @(posedge clk);
    rst <= 1;
    @(posedge clk); #1 $finish;
"""
TRIVIAL_BODY = "    #20 $finish;\n"  # the inputs as they start: reset held, no vector


def sv_testbench(body: str = "", extra: str = "",
                 instance_line: tuple[str, str] | None = None) -> Callable[[Task], str]:
    """A kind's testbench for any SV soak task: SV_TESTBENCHES filled in, and
    `instance_line` (old, new) edited into the design's instance line."""
    def write(task: Task) -> str:
        text = SV_TESTBENCHES[task.toplevel].format(body=body, extra=extra)
        if instance_line:
            old, new = instance_line
            text = text.replace(f"{task.toplevel} {old}", f"{task.toplevel} {new}", 1)
        return text
    return write


GIANT = "  typedef int giant_t [1 << 28];\n"  # 1 GiB
TICK = "  logic tick = 0;\n  always #5 tick = ~tick;\n"  # a clock of the testbench's own
SV_KINDS: dict[str, Kind] = {
    "reference": Kind(0.34, None, "ok"),
    "trivial": Kind(0.10, None, "below_target"),
    "syntax_error": Kind(0.06, sv_testbench("    integer broken = ;\n    #10 $finish;\n"), "syntax_error"),
    "fatal": Kind(0.05, sv_testbench('    #10 $fatal(1, "candidate gave up");\n'), "runtime_error"),
    # the testbench's own failed check: the first $error stops the run (a claim of
    # failure, as a failed cocotb test; docs/harness.md, "The candidate's own checks")
    "error_then_finish": Kind(0.04, sv_testbench('    #10 $error("check failed");\n    $finish;\n'),
                              "runtime_error"),
    "no_instance": Kind(0.04, sv_testbench(TRIVIAL_BODY, instance_line=("uut", "dut")), "no_coverage"),
    "no_finish": Kind(0.04, sv_testbench("    #10;\n", TICK), "timeout"),
    "zero_time_loop": Kind(0.03, sv_testbench("    forever spins = spins + 1;\n", "  integer spins = 0;\n"),
                           "timeout"),
    "output_flood": Kind(0.04, sv_testbench('    forever $display("%s%s%s%s", line, line, line, line);\n',
                                            '  string line = {1024{"x"}};\n'), "output_limit"),
    # 1 GiB elements: the second one is past the 2 GiB address space at once (int
    # elements grow to the limit in small steps: memory, timeout, or an abort with an
    # empty log, as the machine's speed decides; 2 GiB ones do not link). Zeroing the
    # first still takes time: on a starved machine it can outlast a 5 s limit (timeout)
    "huge_array": Kind(0.04, sv_testbench("    big = new[4];\n    big[3][5] = 1;\n    #10 $finish;\n",
                                          GIANT + "  giant_t big[];\n"), "memory"),
    "queue_growth": Kind(0.03, sv_testbench("    forever grow.push_back(blob);\n",
                                            GIANT + "  giant_t blob;\n  giant_t grow[$];\n"), "memory"),
    "parameter_override": Kind(0.04, sv_testbench(TRIVIAL_BODY, instance_line=("uut", "#(.WIDTH(8)) uut")),
                               "syntax_error"),
    "defparam": Kind(0.03, sv_testbench(TRIVIAL_BODY, "  defparam uut.WIDTH = 8;\n"), "syntax_error"),
    "reserved_name": Kind(0.03, sv_testbench(TRIVIAL_BODY, "  integer chorus_recorder = 0;\n"), "syntax_error"),
    "system_call": Kind(0.03, sv_testbench('    void\'($system("echo C 1 > coverage.dat"));\n' + TRIVIAL_BODY),
                        "syntax_error"),
    "fopen_forge": Kind(0.03, sv_testbench('    f = $fopen("coverage.dat", "w");\n    $fwrite(f, "C 1\\n");\n'
                                           + TRIVIAL_BODY, "  integer f;\n"), "syntax_error"),
}


def sv_soak_tasks(folder: Path) -> list[Task]:
    """fx_counter as a testbench task (instance `uut`, its shipped target) and CVDP's
    example row (converted into `folder`), each with a good and a trivial testbench
    file (written into `folder`; the CVDP row's good one is its own solution, fx_counter's
    COUNTER_GOOD_BODY)."""
    folder.mkdir(parents=True, exist_ok=True)
    counter = dataclasses.replace(load_task(FIXTURE_TASK), answer_language="systemverilog", instance="uut",
                                  testbench_file="verif/soak_tb.sv", reference_stimulus=None,
                                  trivial_stimulus=None)  # its shipped stimuli are cocotb's
    tasks = []
    for task in (counter, *convert_cvdp_jsonl(CVDP_EXAMPLE, folder / "cvdp")):
        files = {"trivial": sv_testbench(TRIVIAL_BODY)(task)}
        if task.reference_stimulus is None:
            files["reference"] = sv_testbench(COUNTER_GOOD_BODY)(task)
        paths = {}
        for name, text in files.items():
            paths[name] = folder / f"{task.id}_{name}.sv"
            paths[name].write_text(text)
        tasks.append(dataclasses.replace(task, trivial_stimulus=paths["trivial"],
                                         reference_stimulus=paths.get("reference", task.reference_stimulus)))
    return tasks


class Language(NamedTuple):
    kinds: dict[str, Kind]
    tasks: Callable[[Path], list[Task]]  # the soak's tasks; files they need go to the folder
    results: str  # default file name in benchmarks/results



LANGUAGES = {
    "cocotb": Language(KINDS, lambda folder: soak_tasks(), "soak.json"),
    "systemverilog": Language(SV_KINDS, sv_soak_tasks, "soak_systemverilog.json"),
}


def build_mix(count: int, tasks: list[Task], seed: int = 0, kinds: dict[str, Kind] = KINDS) -> list[dict]:
    """`count` generation rows ({task_id, sample_id, completion, kind}) in a shuffled,
    deterministic mix of `kinds` (each kind at least once when count allows). Every other
    completion is fenced like a model's answer (in the task's answer language), the rest
    are raw code: both forms reach the scorer."""
    rng = random.Random(seed)
    names = list(kinds)
    weights = [kinds[k].share for k in names]
    rows = []
    for index in range(count):
        kind = names[index] if index < len(names) else rng.choices(names, weights)[0]
        task = tasks[index % len(tasks)]
        body = kinds[kind].body
        if body is None:
            body = (task.reference_stimulus if kind == "reference" else task.trivial_stimulus).read_text()
        elif callable(body):
            body = body(task)
        completion = f"```{FENCE_TAGS[task.answer_language]}\n{body}```\n" if index % 2 else body
        rows.append({"task_id": task.id, "sample_id": f"soak-{index:05d}", "kind": kind, "completion": completion})
    rng.shuffle(rows)
    return rows


def check_results(rows: list[dict], results: list[dict], kinds: dict[str, Kind] = KINDS) -> list[str]:
    """Problems found (empty when all is well): one result per sample, expected verdicts."""
    problems = []
    ids = Counter(r["sample_id"] for r in results)
    duplicated = [s for s, n in ids.items() if n > 1]
    missing = {r["sample_id"] for r in rows} - set(ids)
    unknown = set(ids) - {r["sample_id"] for r in rows}
    if duplicated:
        problems.append(f"{len(duplicated)} samples with more than one result, e.g. {duplicated[:3]}")
    if missing:
        problems.append(f"{len(missing)} samples without a result, e.g. {sorted(missing)[:3]}")
    if unknown:
        problems.append(f"{len(unknown)} results for samples never submitted, e.g. {sorted(unknown)[:3]}")
    by_id = {r["sample_id"]: r for r in results}
    for row in rows:
        result = by_id.get(row["sample_id"])
        if result is None:
            continue
        expected = kinds[row["kind"]].expected
        if result["status"] != expected or result["passed"] != (expected == "ok"):
            problems.append(f"{row['sample_id']} ({row['kind']}, {row['task_id']}): expected {expected}, "
                            f"got {result['status']} passed={result['passed']}: {result['detail'][:200]!r}")
    return problems


def sandbox_processes() -> list[int]:
    """Live processes owned by any sandbox uid, right now."""
    return [pid for uid in range(SANDBOX_UID_BASE, SANDBOX_UID_BASE + SLOT_COUNT) for pid in processes_of_uid(uid)]


def held(path: Path) -> bool:
    """Whether a live scorer holds the flock of `path` (a candidate's folder or the lock
    file of a sandbox uid's slot): what it holds is in use, not left behind."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # gone
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def candidate_folders() -> set[Path]:
    """Candidates' folders on this host right now, in both places the sandbox puts them
    (the temp folder; as root CHORUS_SANDBOX_DIR or /run/chorus-sandbox), and in their
    trash folders (a folder too slow to remove is moved there under its own name)."""
    parents = {Path(tempfile.gettempdir()), Path(os.environ.get("CHORUS_SANDBOX_DIR") or "/run/chorus-sandbox")}
    found = set()
    for place in (folder for parent in parents for folder in (parent, parent / TRASH_DIR)):
        try:
            found |= {place / name for name in os.listdir(place) if name.startswith(RUN_PREFIX)}
        except OSError:  # not there (or not ours to read)
            continue
    return found


def still_there(probe: Callable[[], Iterable], grace_s: float) -> list:
    """What `probe` finds now and still finds after up to `grace_s` (the same items)."""
    left = set(probe())
    deadline = time.monotonic() + grace_s
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left &= set(probe())
    return sorted(left)


def leftover_sandbox_processes(grace_s: float = 10.0) -> list[int]:
    """Sandbox processes that outlived their candidate. The scorer kills a candidate's
    processes before it returns its result, so a finished run leaves none; the grace
    period only lets candidates end whose uid's slot is free. A process whose slot a live
    scorer holds (someone else's concurrent run on this host) is not counted."""
    def orphans() -> list[int]:
        return [pid for slot in range(SLOT_COUNT) if not held(SLOT_DIR / f"{slot}.lock")
                for pid in processes_of_uid(SANDBOX_UID_BASE + slot)]
    return still_there(orphans, grace_s)


def leftover_candidate_folders(before: set[Path], grace_s: float = 10.0) -> list[Path]:
    """Candidate folders made since `before` was taken that outlive the run, their scorer
    gone (the grace lets the trash's background removal finish; a folder a live scorer
    holds, someone else's concurrent run, is not counted)."""
    return still_there(lambda: {f for f in candidate_folders() - before if not held(f)}, grace_s)


def _status_kb(field: str) -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


def reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark (VmHWM), so the peak covers the soak alone and
    not what the process held before (a test session's earlier models)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def memory_figures(peak_was_reset: bool) -> dict[str, float | None]:
    """MB: the scorer's RSS now and its peak (during the soak when the mark was reset),
    getrusage's peaks of this process and of its largest waited-for child."""
    mb = 1 / 1024  # /proc and ru_maxrss count KiB on Linux
    hwm = _status_kb("VmHWM")
    return {
        "scorer_rss_end_mb": round(_status_kb("VmRSS") * mb, 1),
        "scorer_peak_during_soak_mb": round(hwm * mb, 1) if peak_was_reset and hwm else None,
        "ru_maxrss_self_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * mb, 1),
        "ru_maxrss_children_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * mb, 1),
    }


def soak(count: int, workers: int, timeout_s: float, out_jsonl: Path, seed: int = 0,
         language: str = "cocotb") -> dict:
    """Score a mix of `count` candidates of `language` (LANGUAGES) through
    score_generations into `out_jsonl` (task files the mix needs go beside it); the
    figures and the problems found (empty list: every check holds)."""
    kinds = LANGUAGES[language].kinds
    tasks = LANGUAGES[language].tasks(out_jsonl.parent / "soak-tasks")
    rows = build_mix(count, tasks, seed, kinds)
    limits = SandboxLimits(timeout_s=timeout_s)
    folders_before = candidate_folders()
    rss_start_kb = _status_kb("VmRSS")
    peak_was_reset = reset_peak_rss()
    start = time.perf_counter()
    score_generations(rows, {t.id: t for t in tasks}, out_jsonl, workers=workers, limits=limits,
                      extract=extract_answer)
    wall = time.perf_counter() - start
    memory = memory_figures(peak_was_reset)
    # the table on disk, not the returned list, is what the pipeline keeps
    on_disk = [json.loads(line) for line in out_jsonl.read_text().splitlines() if line.strip()]
    problems = check_results(rows, on_disk, kinds)
    if out_jsonl.with_name(out_jsonl.name + ".partial").exists():
        problems.append("the .partial sidecar outlived a finished run")
    left = leftover_sandbox_processes()
    if left:
        problems.append(f"sandbox processes left alive: {left[:10]}")
    left_folders = leftover_candidate_folders(folders_before)
    if left_folders:
        problems.append(f"candidate folders left behind: {[str(f) for f in left_folders[:10]]}")
    kind_of = {r["sample_id"]: r["kind"] for r in rows}
    seconds_by_kind: dict[str, list[float]] = {}
    for result in on_disk:
        seconds_by_kind.setdefault(kind_of[result["sample_id"]], []).append(result["sim_time_s"])
    return {
        "machine": f"{platform.node()} {platform.machine()}, {len(os.sched_getaffinity(0))} cores",
        "date": date.today().isoformat(),
        "language": language,
        "candidates": count,
        "workers": workers,
        "timeout_s": timeout_s,
        "tasks": [t.id for t in tasks],
        "wall_s": round(wall, 1),
        "candidates_per_s": round(count / wall, 3),
        "results_on_disk": len(on_disk),
        "distinct_sample_ids": len({r["sample_id"] for r in on_disk}),
        "kinds": dict(Counter(r["kind"] for r in rows)),
        "statuses": dict(Counter(r["status"] for r in on_disk)),
        "passed": sum(r["passed"] for r in on_disk),
        "median_sim_s_by_kind": {k: round(statistics.median(v), 3) for k, v in sorted(seconds_by_kind.items())},
        "scorer_rss_start_mb": round(rss_start_kb / 1024, 1),
        **memory,
        "leftover_sandbox_processes": len(left),
        "leftover_candidate_folders": len(left_folders),
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--timeout-s", type=float, default=5.0, help="wall-clock limit per candidate")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mix")
    parser.add_argument("--language", choices=sorted(LANGUAGES), default="cocotb",
                        help="the candidates' answer language")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/soak.json (soak_<language>.json)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="chorus-soak-") as tmp:
        report = soak(args.candidates, args.workers, args.timeout_s, Path(tmp) / "scores.jsonl", args.seed,
                      args.language)
    args.out = args.out or RESULTS / LANGUAGES[args.language].results
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['candidates']} candidates in {report['wall_s']} s with {report['workers']} sandboxes "
          f"({report['candidates_per_s']} candidates/s), {report['machine']}")
    print(f"results on disk: {report['results_on_disk']} rows, {report['distinct_sample_ids']} distinct "
          f"sample ids; passed: {report['passed']} (references: {report['kinds'].get('reference', 0)})")
    print(f"statuses: {report['statuses']}")
    print(f"median simulation seconds by kind: {report['median_sim_s_by_kind']}")
    print(f"scorer RSS: {report['scorer_rss_start_mb']} MB at start, {report['scorer_rss_end_mb']} MB at end, "
          f"peak during the soak {report['scorer_peak_during_soak_mb']} MB (ru_maxrss {report['ru_maxrss_self_mb']} MB); "
          f"largest child ru_maxrss {report['ru_maxrss_children_mb']} MB")
    print(f"sandbox processes left alive: {report['leftover_sandbox_processes']}; candidate folders left: "
          f"{report['leftover_candidate_folders']}")
    for problem in report["problems"][:20]:
        print("PROBLEM:", problem)
    print("OK" if not report["problems"] else f"FAILED: {len(report['problems'])} problems")
    print(f"wrote {args.out}")
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
