"""The workflow follows the Snakemake catalog's formatting standard (snakefmt)."""

import re
import subprocess

import pytest

from conftest import BIN, REPO


def test_snakefile_and_rules_are_snakefmt_clean():
    proc = subprocess.run(
        [str(BIN / "snakefmt"), "--check", "Snakefile", "rules"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout


def test_every_rule_has_log_and_benchmark():
    for smk in (REPO / "rules").glob("*.smk"):
        text = smk.read_text()
        rules = len(re.findall(r"^ *(?:use )?rule \w+", text, re.M))  # inside an `if` too
        assert text.count("    log:") == rules and text.count("    benchmark:") == rules, smk.name


@pytest.mark.slow
def test_snakemake_lint_is_clean():
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--lint", "-s", str(REPO / "Snakefile")],
        cwd=REPO, capture_output=True, text=True,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Congratulations" in output, output[-4000:]


def test_rules_ask_the_plan_for_paths_and_job_settings():
    """Model paths, job sizes and the config's job settings come from chorus.plan.Plan;
    every input function is defined in rules/common.smk, none inline in a rule."""
    for smk in (REPO / "rules").glob("*.smk"):
        text = smk.read_text()
        assert "/models/" not in text and "/eval/" not in text, f"{smk.name}: a literal model or pool path"
        assert 'config["resources"]' not in text, f"{smk.name}: job resources not from the Plan"
        if smk.name != "common.smk":
            assert not re.search(r"^def ", text, re.M), f"{smk.name}: an input function outside common.smk"
        for inputs in re.findall(r"^    input:\n((?:        .*\n)+)", text, re.M):
            assert "lambda" not in inputs, f"{smk.name}: an inline input function"
