"""The workflow follows the Snakemake catalog's formatting standard (snakefmt)."""

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
        rules = text.count("\nrule ")
        assert text.count("    log:") == rules and text.count("    benchmark:") == rules, smk.name


@pytest.mark.slow
def test_snakemake_lint_is_clean():
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--lint", "-s", str(REPO / "Snakefile")],
        cwd=REPO, capture_output=True, text=True,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Congratulations" in output, output[-4000:]
