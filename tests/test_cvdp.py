"""CVDP cid012 in CVDP's terms: the real example row converts (black-box prompt, the row's
TARGET, a SystemVerilog testbench answer); Verilator grades its own solution as passing
and a two-vector testbench as failing; hostile testbenches get a failed status; malformed
rows are rejected naming row and field. CHORUS_CVDP_JSONL=<a CVDP *with_solutions* file>
adds a test that grades every cid012 row's own solution."""

import copy
import dataclasses
import json
import os
from pathlib import Path

import pytest

from chorus.cvdp import CvdpFormatError, convert_cvdp_jsonl
from chorus.harness import SandboxLimits, score, score_generations
from chorus.harness import svtb
from chorus.harness.sandbox import confinement_support
from conftest import run_bounded
from chorus.prompts import answer_format, build_prompt, clock_inputs, extract_answer, format_completion
from chorus.tasks import TaskFormatError, load_task, load_tasks

FIXTURES = Path(__file__).parent / "fixtures" / "cvdp"
REAL = FIXTURES / "cvdp_v1.1.0_example_nonagentic_code_generation_commercial_with_solutions.jsonl"
AGENTIC = FIXTURES / "cvdp_v1.1.0_example_agentic_code_generation_commercial.jsonl"
ROW = json.loads(REAL.read_text().splitlines()[0])
TWO_VECTORS = """`timescale 1ns/1ps
module gf_multiplier_tb;
  reg [3:0] A, B;
  wire [3:0] result;
  gf_multiplier uut (.A(A), .B(B), .result(result));
  initial begin
    A = 4'h0; B = 4'h0; #10;
    A = 4'hf; B = 4'hf; #10;
    $finish;
  end
endmodule
"""


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def gf_task(tmp_path_factory):
    return convert_cvdp_jsonl(REAL, tmp_path_factory.mktemp("cvdp"))[0]


def test_the_real_row_converts_in_cvdp_terms(tmp_path, gf_task):
    task = gf_task
    assert task.id == "cvdp_copilot_gf_multiplier_0039"
    assert (task.toplevel, task.difficulty, task.split) == ("gf_multiplier", "easy", "test")
    assert task.answer_language == "systemverilog"
    assert (task.testbench_file, task.instance) == ("verif/gf_multiplier_tb.sv", "uut")
    assert task.coverage_target == {"average": 0.9}  # TARGET = 90
    assert task.rtl_text() == {"gf_multiplier.sv": ROW["harness"]["files"]["src/gf_multiplier.sv"]}
    assert task.reference_stimulus.read_text() == ROW["output"]["context"]["verif/gf_multiplier_tb.sv"]
    assert [t.id for t in load_tasks(task.root.parent)] == [task.id]
    # black-box, like CVDP: the test plan, no RTL; the answer file and instance named;
    # no clock demanded from a design without one
    system, user = build_prompt(task)
    assert ROW["input"]["prompt"].strip() in user["content"]
    assert "irreducible_poly" not in user["content"] and "always @" not in user["content"]
    assert "verif/gf_multiplier_tb.sv" in user["content"] and "`uut`" in user["content"]
    assert "```systemverilog" in user["content"] and "clk" not in user["content"]
    assert "SystemVerilog" in system["content"]
    assert extract_answer("Here:\n```verilog\nmodule t; endmodule\n```", "systemverilog") == "module t; endmodule\n"

    # the same row without its solution (the plain file), white-box on request
    plain = copy.deepcopy(ROW)
    plain["output"]["context"]["verif/gf_multiplier_tb.sv"] = ""
    white = convert_cvdp_jsonl(write_jsonl(tmp_path / "plain.jsonl", [plain]), tmp_path / "w", white_box=True)[0]
    assert white.reference_stimulus is None
    assert "irreducible_poly" in build_prompt(white)[1]["content"]


def test_prompts_demand_a_clock_only_when_the_design_has_one(gf_task):
    assert clock_inputs(gf_task) == []
    shipped = load_task(Path(__file__).parent / "fixtures" / "tasks" / "fx_counter")
    assert clock_inputs(shipped) == ["clk"]
    assert "Clock(dut.clk" in answer_format(shipped)
    # the cocotb format for a combinational design: time passes by Timer, no clock
    text = answer_format(dataclasses.replace(gf_task, answer_language="cocotb"))
    assert "```python" in text and "clk" not in text and "Timer" in text


@pytest.mark.parametrize(
    ("ports", "clocks"),
    [
        ("input logic clk_en, input logic [3:0] a, output logic y", []),  # an enable is no clock
        ("input wire i_clk, input rst_n, // clk in comments\n output y", ["i_clk"]),
        ("input [0:0] sys_clk, clk_div, output reg y", ["sys_clk"]),
        ("clk, y); input clk; output y", ["clk"]),  # non-ANSI
    ],
)
def test_clock_inputs_are_found_by_name(tmp_path, gf_task, ports, clocks):
    rtl = tmp_path / "m.sv"
    rtl.write_text(f"module m ({ports});\nendmodule\n")
    assert clock_inputs(dataclasses.replace(gf_task, rtl_files=(rtl,))) == clocks


@pytest.mark.slow
def test_its_own_solution_passes_and_two_vectors_do_not(gf_task, tmp_path):
    # as model completions through chorus-eval's path: the answer is the fenced block
    rows = [
        {"task_id": gf_task.id, "sample_id": 0,
         "completion": format_completion(gf_task.reference_stimulus.read_text(), "systemverilog")},
        {"task_id": gf_task.id, "sample_id": 1, "completion": f"Here it is:\n```verilog\n{TWO_VECTORS}```\n"},
    ]
    solution, two = score_generations(rows, {gf_task.id: gf_task}, tmp_path / "scores.jsonl", workers=2,
                                      extract=extract_answer)
    assert solution["status"] == "ok" and solution["passed"], solution["detail"]
    assert solution["cov_average"] >= 0.9
    assert two["status"] == "below_target" and not two["passed"], two["detail"]
    assert two["cov_line"] == 1.0 and two["cov_branch"] == 1.0  # what the old fixed target accepted
    assert two["cov_average"] < 0.9 and two["score"] < solution["score"]


@pytest.mark.slow
def test_the_average_is_configurable(tmp_path):
    # toggle coverage alone: the solution never toggles the constant polynomial bits
    task = convert_cvdp_jsonl(REAL, tmp_path / "t", average_of={"toggle": ["toggle"]})[0]
    result = score(task, task.reference_stimulus.read_text())
    assert result.status == "below_target", result.detail
    assert result.coverage["average"] == pytest.approx(result.coverage["toggle"])


def _in_initial(code):
    return TWO_VECTORS.replace("initial begin", f"integer f;\n  initial begin\n    {code}", 1)


HOSTILE = {
    "system": lambda marker: _in_initial(f'$system("touch {marker}");'),
    "fopen": lambda marker: _in_initial(f'f = $fopen("{marker}", "w"); $fwrite(f, "x"); $fclose(f);'),
    # a macro pastes the name together: the screen reads the preprocessed text
    "macro": lambda marker: "`define PASTE(a, b) a``b\n" + _in_initial(f'f = `PASTE($fop, en)("{marker}", "w");'),
    "dpi": lambda marker: TWO_VECTORS.replace(
        "module gf_multiplier_tb;",
        'module gf_multiplier_tb;\n  import "DPI-C" function int system(input string c);\n'
        f'  initial void\'(system("touch {marker}"));',
    ),
    "force": lambda marker: _in_initial("force uut.temp_result = 4'hf;"),
    "cpp": lambda marker: _in_initial(f'$c("system(\\"touch {marker}\\");");'),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_testbenches_get_a_failed_status(gf_task, tmp_path, attack):
    marker = tmp_path / f"escaped_{attack}"
    result = score(gf_task, HOSTILE[attack](marker))
    assert result.status == "syntax_error" and "refused" in result.detail, result.detail
    assert not marker.exists()


@pytest.mark.slow
def test_an_endless_testbench_times_out(gf_task):
    text = TWO_VECTORS.replace("$finish;", "forever begin A = A + 1; #1; end")
    result = score(gf_task, text, limits=SandboxLimits(timeout_s=5))
    assert result.status == "timeout" and not result.passed


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the read-only filesystem and uid drop need root")
def test_the_sandbox_holds_when_the_screen_is_bypassed(gf_task, tmp_path, monkeypatch):
    # defence in depth: even unscreened, $system and $fopen outside the folder fail
    monkeypatch.setattr(svtb, "screen_testbench", lambda text, instance: None)
    tmp_path.chmod(0o777)
    marker = tmp_path / "escaped"
    text = TWO_VECTORS.replace(
        "initial begin",
        f'integer f;\n  initial begin\n    void\'($system("touch {marker}_system"));\n'
        f'    f = $fopen("{marker}_fopen", "w"); $fwrite(f, "x");',
        1,
    )
    result = score(gf_task, text)
    assert result.status == "below_target", result.detail  # it ran, and could not escape
    assert not Path(f"{marker}_system").exists() and not Path(f"{marker}_fopen").exists()


def test_no_uut_instance_a_replaced_design_or_no_module_fails(gf_task):
    renamed = score(gf_task, TWO_VECTORS.replace(" uut ", " dut "))
    assert renamed.status == "no_coverage" and "uut" in renamed.detail
    # a testbench that brings its own gf_multiplier (all points "covered") does not build
    fake = "module gf_multiplier(input [3:0] A, B, output [3:0] result);\n  assign result = A;\nendmodule\n"
    replaced = score(gf_task, fake + TWO_VECTORS)
    assert replaced.status == "syntax_error" and "MODDUP" in replaced.detail, replaced.detail
    assert score(gf_task, "this is not SystemVerilog").status == "syntax_error"


def _edit(path, value):
    def apply(row):
        *parents, last = path.split(":")
        node = row
        for key in parents:
            node = node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value
    return apply


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_edit("input", KeyError), r"missing field 'input.prompt'"),
        (_edit("input:prompt", "  "), r"'input.prompt' is empty"),
        (_edit("input:context", ["rtl/x.sv"]), r"'input.context' must be an object"),
        (_edit("output:context", {}), r"exactly one testbench file"),
        (_edit("output:context", {"verif/tb.py": ""}), r"not a SystemVerilog file path"),
        (_edit("harness", KeyError), r"missing field 'harness.files'"),
        (_edit("harness:files:src/.env", "HASH = 1\n"), r"lacks TARGET"),
        (_edit("harness:files:src/.env", "TARGET = 190\n"), r"TARGET 190.0 is not a percentage"),
        (_edit("harness:files:src/gf_multiplier.sv", KeyError), r"simulates '/src/gf_multiplier.sv', which is not"),
    ],
)
def test_malformed_cid012_rows_are_rejected(tmp_path, edit, message):
    bad = copy.deepcopy(ROW)
    edit(bad)
    source = write_jsonl(tmp_path / "bad.jsonl", [bad])
    with pytest.raises(CvdpFormatError, match=r"cvdp_copilot_gf_multiplier_0039.*" + message):
        convert_cvdp_jsonl(source, tmp_path / "tasks")


def test_other_categories_agentic_rows_and_arguments(tmp_path):
    agentic = json.loads(AGENTIC.read_text().splitlines()[0])
    agentic_cid012 = {**agentic, "id": "cvdp_agentic_x_0001", "categories": ["cid012", "easy"]}
    other = {**copy.deepcopy(ROW), "id": "cvdp_copilot_other_0001", "categories": ["cid003", "easy"]}
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [agentic_cid012, "", other, ROW])
    assert [t.id for t in convert_cvdp_jsonl(mixed, tmp_path / "t")] == [ROW["id"]]
    with pytest.raises(CvdpFormatError, match="agentic"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "a.jsonl", [agentic_cid012]), tmp_path / "a")
    with pytest.raises(CvdpFormatError, match="repeats row"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "dup.jsonl", [ROW, ROW]), tmp_path / "dup")
    with pytest.raises(CvdpFormatError, match=r"broken.jsonl:1: not valid JSON"):
        convert_cvdp_jsonl(write_jsonl(tmp_path / "broken.jsonl", ['{"id": ']), tmp_path / "b")
    with pytest.raises(TaskFormatError, match="fraction"):
        convert_cvdp_jsonl(REAL, tmp_path / "t", target=1.5)
    with pytest.raises(TaskFormatError, match="coverage_average.block"):
        convert_cvdp_jsonl(REAL, tmp_path / "t", average_of={"block": ["lines"]})
    overridden = convert_cvdp_jsonl(REAL, tmp_path / "o", target=0.5)[0]
    assert overridden.coverage_target == {"average": 0.5}
    # a rerun with other rows leaves exactly the new rows in the folder
    renamed = {**copy.deepcopy(ROW), "id": "cvdp_copilot_gf_multiplier_0040"}
    convert_cvdp_jsonl(write_jsonl(tmp_path / "r.jsonl", [renamed]), tmp_path / "t")
    assert [t.id for t in load_tasks(tmp_path / "t")] == ["cvdp_copilot_gf_multiplier_0040"]


def test_task_yaml_answer_language_is_checked(tmp_path, gf_task):
    import shutil

    import yaml

    folder = tmp_path / gf_task.id
    shutil.copytree(gf_task.root, folder)
    meta = yaml.safe_load((folder / "task.yaml").read_text())
    for field, value, message in (
        ("answer_language", "vhdl", "answer_language"),
        ("testbench", None, "testbench"),
        ("testbench", {"file": "../escape.sv"}, "testbench.file"),
    ):
        broken = {**meta, field: value}
        (folder / "task.yaml").write_text(yaml.safe_dump(broken))
        with pytest.raises(TaskFormatError, match=message):
            load_task(folder)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("CHORUS_CVDP_JSONL"), reason="set CHORUS_CVDP_JSONL to a CVDP file")
def test_a_real_cvdp_file_converts_and_its_solutions_pass(tmp_path):
    """CHORUS_CVDP_JSONL: a non-agentic CVDP file with cid012 rows; with a *with_solutions*
    file every row's own testbench must reach the row's TARGET."""
    tasks = convert_cvdp_jsonl(os.environ["CHORUS_CVDP_JSONL"], tmp_path / "cvdp")
    assert tasks and len({t.id for t in tasks}) == len(tasks)  # one task a row, none lost to a name clash
    solved = [t for t in tasks if t.reference_stimulus is not None]
    failures = {}
    for task in solved:
        result = score(task, task.reference_stimulus.read_text())
        if not result.passed:
            failures[task.id] = (result.status, result.coverage, result.detail[-300:])
    print(f"{len(tasks)} cid012 rows, {len(solved)} with solutions, {len(solved) - len(failures)} pass")
    assert not failures


# -- the SystemVerilog path's outputs: root-owned, read through the scorer's descriptors --
IDLE = """`timescale 1ns/1ps
module gf_multiplier_tb;
  reg [3:0] A = 4'h0, B = 4'h0;
  wire [3:0] result;
  gf_multiplier uut (.A(A), .B(B), .result(result));
  integer f;
  string cov;
  initial begin
ATTACK    #10 $finish;
  end
endmodule
"""


def _sv_literal(text):
    """`text` as a SystemVerilog string literal (octal escapes for control bytes)."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif ord(char) < 32:
            out.append(f"\\{ord(char):03o}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


@pytest.mark.slow
def test_coverage_forged_in_the_testbench_home_does_not_count(gf_task, monkeypatch):
    """With the screen bypassed ($fopen allowed), a testbench writes a coverage file that
    claims every point of `uut` into its working folder (Verilator's default place), left
    unclosed so it is flushed after the simulator's own write: the scorer reads only the
    file Verilator wrote to the root-owned output folder."""
    universe = json.loads((svtb.ensure_sv_build(gf_task) / "points.json").read_text())
    forged = "# SystemC::Coverage-3\n" + "".join(
        f"C '{pid}\x01h\x02gf_multiplier_tb.uut' 9\n" for ids in universe.values() for pid in ids
    )
    # the forgery is perfect: read as the scorer reads coverage, it claims everything
    claimed = svtb.instance_coverage(forged, "gf_multiplier_tb", "uut", universe)
    assert claimed and all(hit == total for hit, total in claimed.values())
    writes = "".join(f'    $fwrite(f, "%s", {_sv_literal(line + chr(10))});\n' for line in forged.splitlines())
    monkeypatch.setattr(svtb, "screen_testbench", lambda text, instance: None)
    honest = score(gf_task, IDLE.replace("ATTACK", ""))
    attacked = score(gf_task, IDLE.replace("ATTACK", '    f = $fopen("coverage.dat", "w");\n' + writes))
    assert honest.status == "below_target", honest.detail
    assert attacked.status == honest.status, attacked.detail
    assert attacked.coverage == honest.coverage and attacked.score == honest.score


# how the attack replaces one output, and how the run ends: the simulator blocks writing
# its coverage into the FIFO (killed at the wall-clock limit), or cannot write through
# the symlink (the host's files are read-only to it) and fails
REPLACE_SV_OUTPUTS = {
    "fifo": ("rm -f $d/$n; mkfifo $d/$n", "timeout"),
    "symlink-to-secret": ("rm -f $d/$n; ln -s {secret} $d/$n", "runtime_error"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(REPLACE_SV_OUTPUTS))
def test_testbench_replacing_its_outputs_hangs_and_leaks_nothing(gf_task, monkeypatch, secret, kind):
    """A testbench running as the scorer's own user (no uid drop), with the screen
    bypassed ($system allowed), finds its output folder from the coverage plusarg and
    tries to replace the coverage file, the log and the confinement report with a FIFO
    or a symlink to a secret, and the same names in its home. With namespaces its root
    has the output folder and home read-only (only the coverage file writable, and not
    replaceable: a mount point), so every replacement fails and the run scores exactly
    what the same testbench without the attack scores. Without namespaces the
    replacements succeed: the scorer neither hangs nor reads the secret, and no
    coverage counts."""
    replace, status = REPLACE_SV_OUTPUTS[kind]
    replace = replace.format(secret=secret)
    script = (f"d=$(dirname %s); for n in coverage.dat sim.log confinement.json; do {replace}; done; "
              f"d=.; for n in coverage.dat sim.log confinement.json; do {replace}; done; echo replaced")
    attack = (f'    if (!$value$plusargs("verilator+coverage+file+%s", cov)) $fatal(1, "no coverage plusarg");\n'
              f'    void\'($system($sformatf({_sv_literal(script)}, cov)));\n')
    monkeypatch.setattr(svtb, "screen_testbench", lambda text, instance: None)
    limits = SandboxLimits(timeout_s=8, drop_privileges=False)
    result = run_bounded(lambda: score(gf_task, IDLE.replace("ATTACK", attack), limits=limits), timeout_s=300)
    assert "SECRET" not in result.detail
    if confinement_support().get("namespaces"):
        plain = run_bounded(lambda: score(gf_task, IDLE.replace("ATTACK", ""), limits=limits), timeout_s=300)
        assert plain.coverage and not plain.passed  # the idle testbench's own, real coverage
        assert (result.status, result.score, result.coverage) == (plain.status, plain.score, plain.coverage)
        return
    assert result.status == status and not result.passed, result.detail
    assert result.score == 0.0 and not result.coverage
    if status == "runtime_error":  # the log tail: the attack ran
        assert "replaced" in result.detail and "coverage.dat" in result.detail


def _confined_shell(script, limits, **env):
    """Run `script` as the candidate through run_confined in a fresh folder, with an
    output folder like the simulate step's; returns (run, coverage bytes or None)."""
    from chorus.harness.outputs import COVERAGE_NAME
    from chorus.harness.sandbox import _read_output, confined_workdir, run_confined

    with confined_workdir(limits) as folder, folder.outputs("simulate", writes=(COVERAGE_NAME,)) as outputs:
        run = run_confined(["/bin/sh", "-c", script], {"PATH": "/usr/bin:/bin", "OUT": str(outputs.out), **env},
                           folder, outputs, limits)
        return run, _read_output(outputs, COVERAGE_NAME, 1 << 20), folder.uid


@pytest.mark.parametrize("drop", [True, False], ids=["sandbox-uid", "scorer-uid"])
def test_run_confined_outputs_survive_fifos_and_symlinks(secret, drop):
    """The layout itself, the candidate a shell command: it writes its coverage, then
    tries to replace every file of its output folder (and the names the old layout read
    in its home) with a FIFO or a symlink to a secret. As the sandbox uid, or with
    namespaces (the output folder is read-only in the candidate's root, the files it
    writes single writable mounts), every attempt fails and the coverage is read;
    as the scorer's own user without namespaces the replacements succeed, and the scorer
    still reads only its own descriptors: no hang, no secret, and the files unlinked
    (coverage, confinement report) do not count."""
    if drop and os.geteuid() != 0:
        pytest.skip("the sandbox uid needs root")
    script = """echo real-coverage > "$OUT/coverage.dat"
for n in coverage.dat sim.log confinement.json job.json; do
  if rm -f "$OUT/$n" 2>/dev/null && mkfifo "$OUT/$n" 2>/dev/null; then echo "replaced $n"; else echo "kept $n"; fi
done
ln -s "$OUT" out-link 2>/dev/null; ln -s "$SECRET" "$OUT/secret" 2>/dev/null
for n in coverage.dat sim.log confinement.json design.pp all.pp; do mkfifo "$n"; done
echo done
"""
    limits = SandboxLimits(timeout_s=20, drop_privileges=drop)
    run, coverage, uid = run_bounded(lambda: _confined_shell(script, limits, SECRET=str(secret)), timeout_s=120)
    assert run.returncode == 0 and not run.timed_out, run.log_tail
    assert "done" in run.log_tail and "SECRET" not in run.log_tail
    if uid is not None or confinement_support().get("namespaces"):
        # the child's report, through its descriptor
        assert run.confinement["privileges_dropped"] if uid is not None else run.confinement["namespaces"]
        assert run.log_tail.count("kept") == 4 and "replaced" not in run.log_tail, run.log_tail
        assert coverage == b"real-coverage\n"
    else:
        assert "replaced coverage.dat" in run.log_tail
        assert coverage is None and run.confinement == {}  # unlinked: refused as tampered
