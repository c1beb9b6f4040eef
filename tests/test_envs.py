"""envs/*.yaml as Snakemake's --sdm conda uses them: copied elsewhere, so nothing may
point into the checkout, and their pins must be pyproject.toml's. (No conda exists on
the CI machines: building the environments is not tested here; docs/config.md says so.)"""

import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from conftest import REPO

ENVS = sorted((REPO / "envs").glob("*.yaml"))


def pinned() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return {Requirement(r).name.lower(): Requirement(r) for r in requirements}


@pytest.mark.parametrize("env", ENVS, ids=[e.name for e in ENVS])
def test_env_is_self_contained_and_pinned_like_pyproject(env):
    spec = yaml.safe_load(env.read_text())
    assert "conda-forge" in spec["channels"]
    pip = [d for d in spec["dependencies"] if isinstance(d, dict)]
    pip_requirements = pip[0]["pip"] if pip else []
    project = pinned()
    for line in pip_requirements:
        assert not line.startswith(("-e", ".", "/", "file:")), f"{env.name}: {line} points into the checkout"
        requirement = Requirement(line)
        expected = project.get(requirement.name.lower())
        assert expected is not None, f"{env.name}: {requirement.name} is not a project dependency"
        assert requirement.specifier == expected.specifier, f"{env.name}: {line} vs pyproject {expected}"
    assert "deepspeed" not in " ".join(pip_requirements)  # needs torch at build time


def test_rules_name_existing_envs():
    for smk in (REPO / "rules").glob("*.smk"):
        for line in smk.read_text().splitlines():
            if '"../envs/' in line:
                assert (REPO / "rules" / line.strip().strip('"')).resolve().exists(), line


def test_package_version_matches_pyproject():
    import chorus

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chorus.__version__ == project["version"]
