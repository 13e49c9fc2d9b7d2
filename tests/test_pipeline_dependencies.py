"""The conda environment of the rules (envs/attngeom.yaml) installs what pyproject.toml declares, so a
run with `--software-deployment-method conda` has every import the rules make; the base install holds
the library, the `pipeline` extra the workflow."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch", "matplotlib": "matplotlib-base"}
"""PyPI name → conda-forge name, where they differ."""
RUN_THE_WORKFLOW = {"snakemake", "snakemake-executor-plugin-slurm"}
"""Needed where Snakemake runs, not inside a rule's environment."""


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def conda_environment() -> tuple[dict[str, str], dict[str, str]]:
    """(conda package → version bound, pip package → version bound) of envs/attngeom.yaml."""
    conda, pip = {}, {}
    for item in yaml.safe_load((ROOT / "envs" / "attngeom.yaml").read_text())["dependencies"]:
        if isinstance(item, dict):
            pip.update({(r := Requirement(line)).name.lower(): str(r.specifier) for line in item["pip"]})
        else:
            name, _, bound = item.partition(" ")
            conda[name.lower()] = bound.replace(" ", "")
    return conda, pip


def test_the_rules_environment_has_every_runtime_dependency_at_a_version_pyproject_allows():
    requirements = [
        Requirement(r) for r in project()["dependencies"] + project()["optional-dependencies"]["pipeline"]
    ]
    conda, pip = conda_environment()
    expected = {
        CONDA_NAMES.get(r.name.lower(), r.name.lower()): r.specifier
        for r in requirements
        if r.name.lower() not in RUN_THE_WORKFLOW
    }
    found = {**conda, **pip}
    assert sorted(set(expected) - set(found)) == [], "envs/attngeom.yaml lacks these dependencies"
    for name, specifier in expected.items():
        (pinned,) = [s.version for s in Requirement(f"x{found[name]}").specifier if s.operator == "=="]
        assert specifier.contains(pinned, prereleases=True), (name, pinned, str(specifier))
    # python and pip make the environment; setuptools builds attngeom in it (attngeom.post-deploy.sh)
    assert set(conda) - set(expected) == {"python", "pip", "setuptools"}, (
        "envs/attngeom.yaml lists a package pyproject.toml does not"
    )
    assert set(pip) <= set(expected)


def test_the_library_does_not_depend_on_the_workflow_engine():
    base = {Requirement(r).name.lower() for r in project()["dependencies"]}
    pipeline = {Requirement(r).name.lower() for r in project()["optional-dependencies"]["pipeline"]}
    assert RUN_THE_WORKFLOW <= pipeline and not base & (RUN_THE_WORKFLOW | {"matplotlib"})
    assert "pipeline" in (ROOT / "Makefile").read_text().split('-e ".[')[1].split("]")[0].split(",")


def test_matplotlib_is_imported_only_by_the_figure_modules():
    importers = {
        str(path.relative_to(ROOT / "src"))
        for path in (ROOT / "src").rglob("*.py")
        if "import matplotlib" in path.read_text()
    }
    assert importers <= {"attngeom/report/score_figures.py", "attngeom/report/training_figures.py"}
