"""SystemVerilog testbench answers are scored by the replay (docs/harness.md, "Replay"):
Run 1 (the candidate's testbench, sandboxed) records the inputs of the design's instance,
Run 2 replays them into the design alone. Equivalence: Run 1's own coverage of the
instance equals Run 2's point for point (CVDP's example row, a clocked design driven in
the styles that race with its clock edge). Attacks, with the screen bypassed so the
testbench can write files and start processes, as root and as an unprivileged scorer:
forged coverage files, a process ended before its final write, a helper that writes
coverage after it: none of it counts. Hostile testbenches: an input trace past its bound,
parameter overrides, names of the scorer's own modules."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from chorus.cvdp import convert_cvdp_jsonl
from chorus.harness import SandboxLimits, score, svtb
from chorus.harness.coverage import point_id
from chorus.harness.replay import canonical_trace, replay
from chorus.harness.verdict import points_for, with_averages
from chorus.tasks import load_task
from conftest import run_bounded
from test_cvdp import IDLE, REAL, TWO_VECTORS, _sv_literal

REPO = Path(__file__).resolve().parents[1]
FX_COUNTER = REPO / "tests" / "fixtures" / "tasks" / "fx_counter"
NOBODY = 65534
# every way a testbench drives a clocked design around its edges: blocking and
# non-blocking writes right after the edge, writes between edges, a reset held from time 0
COUNTER_TB = """`timescale 1ns/1ps
module counter_tb;
  logic clk = 0, rst = 1, en;
  wire [3:0] q;
  wire wrap;
  fx_counter uut (.clk(clk), .rst(rst), .en(en), .q(q), .wrap(wrap));
  always #5 clk = ~clk;
  initial begin
    @(posedge clk); rst = 0; en = 1;
    repeat (5) @(posedge clk);
    @(posedge clk) en <= 0;
    @(posedge clk) en <= 1;
    #3 en = 0; #1 en = 1;
    repeat (20) @(negedge clk);
    rst <= 1;
    @(posedge clk); #1 $finish;
  end
endmodule
"""


@pytest.fixture(scope="module")
def gf_task(tmp_path_factory):
    return convert_cvdp_jsonl(REAL, tmp_path_factory.mktemp("cvdp"))[0]


@pytest.fixture(scope="module")
def counter_task():
    shipped = load_task(FX_COUNTER)
    return dataclasses.replace(shipped, answer_language="systemverilog", instance="uut",
                               testbench_file="verif/counter_tb.sv",
                               coverage_target={"line": 1.0, "branch": 1.0, "toggle": 1.0})


def _run1_and_replay(task, text):
    """(Run 1's own hit point ids of the instance, Run 2's) for the universe's points,
    and the verdict of `score`."""
    recorded = svtb.record_testbench(task, text, limits=SandboxLimits(), direct_coverage=True)
    assert isinstance(recorded, svtb.RecordedRun), recorded
    design = svtb.ensure_sv_build(task)
    universe = points_for(task, json.loads((design / "points.json").read_text()))
    ids = {pid for metric in universe.values() for pid in metric}
    direct = svtb.run1_instance_points(recorded.direct_coverage, recorded.top, task.instance)
    direct_hit = {point_id(key) for key, count in direct.items() if count > 0} & ids
    trace, ended = canonical_trace(recorded.trace, [p["width"] for p in svtb.load_input_ports(design)])
    assert ended
    replayed = replay(design / svtb.REPLAY_BINARY, trace, universe, keep_text=True, time_ps=True)
    assert replayed.coverage, replayed.log
    replay_hit = {point_id(key) for key, count in svtb.parse_coverage_points(replayed.text).items() if count} & ids
    direct_counts = {m: (len(direct_hit & set(p)), len(p)) for m, p in universe.items()}
    assert replayed.coverage == direct_counts
    return direct_hit, replay_hit, with_averages(direct_counts, task)


@pytest.mark.slow
@pytest.mark.parametrize("answer", ["reference", "two_vectors", "idle"])
def test_the_replay_reaches_run1s_coverage_point_for_point_cvdp(gf_task, answer):
    text = {"reference": gf_task.reference_stimulus.read_text() if gf_task.reference_stimulus else "",
            "two_vectors": TWO_VECTORS, "idle": IDLE.replace("ATTACK", "")}[answer]
    direct, replayed, coverage = _run1_and_replay(gf_task, text)
    assert direct == replayed and direct
    result = score(gf_task, text)
    assert result.coverage == coverage
    assert result.claimed_pass is True
    if answer == "reference":  # what the direct measure gave before the replay: ok, average 0.913
        assert result.passed and result.coverage["average"] == pytest.approx(0.9134615, abs=1e-6)


@pytest.mark.slow
def test_the_replay_reaches_run1s_coverage_point_for_point_clocked(counter_task):
    direct, replayed, coverage = _run1_and_replay(counter_task, COUNTER_TB)
    assert direct == replayed
    assert coverage["line"] == 1.0 and coverage["branch"] == 1.0  # the wrap branch included
    result = score(counter_task, COUNTER_TB)
    assert result.coverage == coverage and result.status in ("ok", "below_target"), result.detail


WIDE_RTL = """module wide_mix (
  input  logic        clk,
  input  logic [69:0] big,
  input  logic signed [39:0] mid,
  input  logic        sel,
  output logic [69:0] acc
);
  always_ff @(posedge clk) begin
    if (sel) acc <= acc ^ big;
    else if (mid < 0) acc <= {30'b0, mid};
    else acc <= acc + 70'd1;
  end
endmodule
"""
WIDE_TB = """module wide_tb;
  logic clk = 0, sel = 0;
  logic [69:0] big = '0;
  logic signed [39:0] mid = 40'sd5;
  wire [69:0] acc;
  wide_mix uut (.clk(clk), .big(big), .mid(mid), .sel(sel), .acc(acc));
  always #5 clk = ~clk;
  initial begin
    repeat (3) @(posedge clk);
    big = {6'h2a, 64'hdead_beef_0123_4567}; sel = 1;
    @(posedge clk) mid <= -40'sd3;
    @(negedge clk) sel = 0;
    repeat (4) @(posedge clk) big <= ~big;
    #2 $finish;
  end
endmodule
"""


@pytest.mark.slow
def test_the_replay_reaches_run1s_coverage_point_for_point_wide_ports(counter_task, tmp_path):
    """Ports wider than 32 and 64 bits, a signed one going negative, a nonzero
    initializer (mid = 5)."""
    rtl = tmp_path / "wide_mix.sv"
    rtl.write_text(WIDE_RTL)
    task = dataclasses.replace(counter_task, id="wide_mix", toplevel="wide_mix", rtl_files=(rtl,),
                               coverage_target={"line": 1.0, "toggle": 1.0})
    direct, replayed, coverage = _run1_and_replay(task, WIDE_TB)
    assert direct == replayed and coverage["line"] == 1.0


DELAY_RTL = """`timescale 1ns/1ns
module delayed (input logic clk, input logic [3:0] d, output logic [3:0] q, output logic late);
  always @(posedge clk) begin
    #2 q <= d;
  end
  always @(posedge clk) begin
    if (q == 4'h9) late <= 1; else if (q == 4'h3) late <= 0;
  end
endmodule
"""
# d is 9 only from 6 to 8 ns: the design's own #2 after the edge at 5 ns samples it
DELAY_TB = """`timescale 1ns/1ps
module delayed_tb;
  logic clk = 0; logic [3:0] d = 0; wire [3:0] q; wire late;
  delayed uut (.clk(clk), .d(d), .q(q), .late(late));
  always #5 clk = ~clk;
  initial begin
    #6 d = 9; #2 d = 3; #20.5 $finish;
  end
endmodule
"""


@pytest.mark.slow
def test_the_replay_keeps_the_designs_own_delays(counter_task, tmp_path):
    """A design with delays of its own (1 ns units): the replay runs the model's own timed
    events between the recorded steps on the context's time, so the design's #2
    samples what it sampled in Run 1."""
    rtl = tmp_path / "delayed.sv"
    rtl.write_text(DELAY_RTL)
    task = dataclasses.replace(counter_task, id="delayed", toplevel="delayed", rtl_files=(rtl,),
                               coverage_target={"line": 1.0, "branch": 1.0})
    direct, replayed, coverage = _run1_and_replay(task, DELAY_TB)
    assert direct == replayed and coverage["branch"] == 1.0  # q == 9 seen: late set, then cleared


def _printf_format(text):
    """`text` as a printf format inside a single-quoted shell word."""
    return (text.replace("\\", "\\\\").replace("%", "%%").replace("'", "\\047")
            .replace("\x01", "\\001").replace("\x02", "\\002").replace("\n", "\\n"))


def _forged_coverage(task):
    universe = json.loads((svtb.ensure_sv_build(task) / "points.json").read_text())
    lines = [f"C '{pid}\x01h\x02{svtb.RECORD_TOP}.gf_multiplier_tb.uut' 9" for ids in universe.values() for pid in ids]
    lines += [f"C '{pid}\x01h\x02gf_multiplier_tb.uut' 9" for ids in universe.values() for pid in ids]
    return "# SystemC::Coverage-3\n" + "\n".join(lines) + "\n"


def _attack(kind, forged):
    """The testbench lines of one attack: every one writes a coverage file that claims
    every point (to the path of the simulator's own coverage plusarg)."""
    find = '    if (!$value$plusargs("verilator+coverage+file+%s", cov)) $fatal(1, "no plusarg");\n'
    shell = f"printf '{_printf_format(forged)}' > \"$0\""
    if kind == "forge":  # written by the testbench itself, and by a C-library write at the end
        return find + (f'    f = $fopen(cov, "w"); $fwrite(f, "%s", {_sv_literal(forged)}); $fflush(f);\n'
                       f'    void\'($system($sformatf("sh -c %s %s", {_sv_literal(_quote(shell))}, cov)));\n')
    if kind == "end-early":  # the forged file, then the simulator killed before its final writes
        return find + (f'    void\'($system($sformatf("sh -c %s %s", {_sv_literal(_quote(shell))}, cov)));\n'
                       '    void\'($system("kill -9 $PPID"));\n')
    # a helper that waits for the simulator's own final write and appends to it at once
    append = f"printf '{_printf_format(forged.split(chr(10), 1)[1])}' >> \"$0\""
    helper = f'(while [ ! -s "$0" ]; do :; done; {append}) </dev/null >/dev/null 2>&1 &'
    return find + f'    void\'($system($sformatf("sh -c %s %s", {_sv_literal(_quote(helper))}, cov)));\n'


def _idle_hits(task, limits):
    """How many points of the instance the idle testbench itself reaches in Run 1."""
    recorded = svtb.record_testbench(task, IDLE.replace("ATTACK", ""), limits=limits, direct_coverage=True)
    points = svtb.run1_instance_points(recorded.direct_coverage, recorded.top, task.instance)
    return sum(1 for count in points.values() if count)


def _quote(script):
    return "'" + script.replace("'", "'\\''") + "'"


@pytest.mark.slow
@pytest.mark.parametrize("drop", [True, False], ids=["sandbox-uid", "scorer-uid"])
@pytest.mark.parametrize("kind", ["forge", "end-early", "helper"])
def test_forged_coverage_never_counts(gf_task, monkeypatch, drop, kind):
    if drop and os.geteuid() != 0:
        pytest.skip("the sandbox uid needs root")
    monkeypatch.setattr(svtb, "screen_testbench", lambda text, instance: None)
    limits = SandboxLimits(timeout_s=20, drop_privileges=drop)
    honest = run_bounded(lambda: score(gf_task, IDLE.replace("ATTACK", ""), limits=limits), timeout_s=300)
    assert honest.status == "below_target" and honest.coverage, honest.detail
    text = IDLE.replace("ATTACK", _attack(kind, _forged_coverage(gf_task)))
    attacked = run_bounded(lambda: score(gf_task, text, limits=limits), timeout_s=300)
    if kind == "helper":  # the forgery lands in Run 1's own coverage file, which counted before
        recorded = run_bounded(lambda: svtb.record_testbench(gf_task, text, limits=limits, direct_coverage=True),
                               timeout_s=300)
        claimed = svtb.run1_instance_points(recorded.direct_coverage, recorded.top, gf_task.instance)
        assert len([key for key, count in claimed.items() if count]) > _idle_hits(gf_task, limits)
    if kind == "end-early":  # no normal end: no recorded end of the inputs, score 0
        assert attacked.status == "runtime_error" and attacked.score == 0.0, attacked.detail
        assert not attacked.passed and not attacked.coverage
    else:
        assert (attacked.status, attacked.score, attacked.coverage) == (honest.status, honest.score, honest.coverage)


@pytest.mark.slow
def test_forged_coverage_never_counts_for_an_unprivileged_scorer():
    """The attacks above (scorer-uid variants) run by a scorer that is not root (nobody,
    a cache of its own): the same verdicts, nothing counted."""
    if os.environ.get("CHORUS_SVTB_UNPRIVILEGED"):
        pytest.skip("already the unprivileged run")
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to become another user")
    home = Path(tempfile.mkdtemp(prefix="chorus-svtb-unprivileged-"))
    try:
        (home / "tmp").mkdir()
        for folder, _, _ in os.walk(home):
            os.chown(folder, NOBODY, NOBODY)
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO / "src"), "HOME": str(home),
               "TMPDIR": str(home / "tmp"), "CHORUS_CACHE_DIR": str(home / "cache"), "LANG": "C.UTF-8",
               "CHORUS_SVTB_UNPRIVILEGED": "1"}
        inner = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-m", "pytest",
             __file__, "-q", "-rs", "-p", "no:cacheprovider", "-k", "forged_coverage_never_counts and scorer-uid"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=1200,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert inner.returncode == 0, inner.stdout[-6000:] + inner.stderr[-2000:]
    assert "3 passed" in inner.stdout and "skipped" not in inner.stdout, inner.stdout[-3000:]


@pytest.mark.slow
def test_a_trace_past_its_bound_is_an_output_limit(gf_task, monkeypatch):
    monkeypatch.setattr(svtb, "TRACE_MAX_BYTES", 2000)
    busy = TWO_VECTORS.replace("$finish;", "repeat (1000) begin A = A + 1; #1; end\n    $finish;")
    result = score(gf_task, busy)
    assert result.status == "output_limit" and result.score == 0.0, result.detail
    assert score(gf_task, TWO_VECTORS).status == "below_target"  # the same bound holds a short one


@pytest.mark.parametrize(
    ("edit", "status", "message"),
    [
        (lambda t: t.replace("gf_multiplier uut", "gf_multiplier #(.W(4)) uut"), "syntax_error", "parameter"),
        (lambda t: t.replace("initial begin", "defparam uut.W = 4;\n  initial begin"), "syntax_error", "refused"),
        (lambda t: t.replace("initial begin", "integer chorus_recorder;\n  initial begin"), "syntax_error",
         "reserved"),
        (lambda t: t.replace("module gf_multiplier_tb", "module chorus_run1"), "syntax_error", "reserved"),
    ],
    ids=["parameter-override", "defparam", "reserved-variable", "reserved-module"],
)
def test_instances_the_replay_cannot_follow_are_refused(gf_task, edit, status, message):
    result = score(gf_task, edit(TWO_VECTORS))
    assert result.status == status and message in result.detail, result.detail


def test_the_recorder_names_every_input_and_only_inputs():
    ports = [svtb.Port("clk", 1), svtb.Port("data", 70)]
    text = svtb.recorder_source("tb", "uut", ports, limit=123)
    assert "always @(tb.uut.clk or tb.uut.data)" in text and "logic [69:0] last_1 = 0;" in text
    assert "limit = 123" in text and "chorus-inputs 1 2" in text
    # a design without inputs: no sensitivity list, the header and the end only
    assert "always" not in svtb.recorder_source("tb", "uut", [])
