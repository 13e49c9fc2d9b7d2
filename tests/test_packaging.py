"""What an install rests on: the minimum versions CI installs are the bounds pyproject.toml states, the lock
file satisfies pyproject.toml and the conda environment, `make setup` names the CPU index of torch, the
citation names the paper, and the wheel installs and imports in a clean virtual environment."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from test_pipeline_dependencies import CONDA_NAMES, conda_environment

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
CORE = [Requirement(r) for r in PROJECT["dependencies"]]
PIPELINE = [Requirement(r) for r in PROJECT["optional-dependencies"]["pipeline"]]


def pins(path: Path) -> dict[str, Version]:
    """name → version of each ``name==version`` line (comments, blank lines and ``--hash`` lines skipped)."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip().removesuffix("\\").strip()
        if line and not line.startswith("--"):
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = Version(version)
    return found


def lower_bound(requirement: Requirement) -> Version:
    (bound,) = [s.version for s in requirement.specifier if s.operator == ">="]
    return Version(bound)


TEST = [Requirement(r) for r in PROJECT["optional-dependencies"]["test"]]
INTERP = [Requirement(r) for r in PROJECT["optional-dependencies"]["interp"]]
RAISED_WITH_THE_PIPELINE = {
    "numpy": Version("2.4.5"),  # snakemake-executor-plugin-slurm 2.7.1's floors ...
    "pandas": Version("2.3.3"),
    "pyyaml": Version("6.0.3"),
    "scipy": Version("1.15.0"),  # ... and the first scipy that allows that numpy
}
"""The library's floors that the pipeline extra raises: the pipeline's minimums."""


def floors(requirements: list[Requirement]) -> dict[str, Version]:
    """name → stated lower bound, for the requirements that have one (torch: see .ci/min-versions.txt)."""
    return {
        canonicalize_name(r.name): lower_bound(r)
        for r in requirements
        if r.name != "torch" and any(s.operator == ">=" for s in r.specifier)
    }


def test_the_minimum_versions_ci_installs_are_the_stated_lower_bounds():
    assert pins(ROOT / ".ci" / "min-versions.txt") == floors(CORE + TEST + INTERP)
    pipeline = pins(ROOT / ".ci" / "min-versions-pipeline.txt")
    assert pipeline == floors(CORE + PIPELINE) | RAISED_WITH_THE_PIPELINE
    assert all(RAISED_WITH_THE_PIPELINE[name] > floors(CORE)[name] for name in RAISED_WITH_THE_PIPELINE)


def test_the_workflow_asks_for_the_snakemake_pyproject_states():
    """``min_version`` in the Snakefile is the ``snakemake`` floor of the pipeline extra."""
    (snakemake,) = [r for r in PIPELINE if r.name == "snakemake"]
    snakefile = (ROOT / "workflow" / "Snakefile").read_text()
    assert f'min_version("{lower_bound(snakemake)}")' in snakefile


def test_the_lock_file_satisfies_pyproject_and_pins_the_conda_environment():
    lock = ROOT / "envs" / "attngeom.lock.txt"
    locked = pins(lock)
    for requirement in CORE + PIPELINE:
        version = locked.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement.name} is not in the lock file"
        assert requirement.specifier.contains(version, prereleases=True), (requirement, version)
    conda, pip = conda_environment()
    pypi_name = {conda_name: name for name, conda_name in CONDA_NAMES.items()}
    for name, bound in {**conda, **pip}.items():
        if name not in ("python", "pip"):
            (pinned,) = Requirement(f"x{bound}").specifier
            assert pinned.operator == "==", f"envs/attngeom.yaml: {name} {bound} is not pinned"
            version = locked[canonicalize_name(pypi_name.get(name, name))]
            assert Version(pinned.version) == Version(version.public), (name, bound, str(version))


def test_every_locked_package_carries_its_hashes():
    """Each ``name==version`` of the lock is followed by ``--hash=sha256:`` lines, so ``pip install
    --require-hashes`` installs exactly the files locked."""
    lock = ROOT / "envs" / "attngeom.lock.txt"
    hashed: dict[str, bool] = {}
    for line in lock.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if not line.startswith(" "):
            current = canonicalize_name(line.split("==")[0])
            hashed[current] = False
        elif re.fullmatch(r"\s+--hash=sha256:[0-9a-f]{64}( \\)?", line):
            hashed[current] = True
    assert len(hashed) == len(pins(lock)) > 50
    assert [name for name, has in hashed.items() if not has] == []


def test_make_setup_takes_torch_from_the_cpu_index_unless_told_otherwise():
    def torch_line(*args: str) -> str:
        out = subprocess.run(
            ["make", "-n", "-B", "setup", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        (line,) = [x for x in out.splitlines() if "torch==" in x and "pip install" in x]
        return line

    assert "--extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0" in torch_line()
    assert "index-url" not in torch_line("TORCH_INDEX=")
    assert "--extra-index-url https://download.pytorch.org/whl/cu128" in torch_line(
        "TORCH_INDEX=https://download.pytorch.org/whl/cu128"
    )


def test_the_citation_names_the_paper_its_authors_and_this_version():
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["version"] == PROJECT["version"]
    paper = citation["preferred-citation"]
    assert (
        paper["type"] == "conference-paper" and paper["year"] == 2025 and "ICML" in paper["collection-title"]
    )
    title = " ".join(paper["title"].split())
    assert title in " ".join((ROOT / "README.md").read_text().split()).replace("*", "")
    assert [a["family-names"] for a in paper["authors"]] == [
        "Saponati",
        "Sager",
        "Aceituno",
        "Stadelmann",
        "Grewe",
    ]


@pytest.mark.slow
def test_the_wheel_builds_and_installs_into_a_clean_venv(tmp_path):
    """`pip wheel . --no-deps`, then a fresh venv that gets only the wheel: it imports, and carries
    py.typed, the license and the metadata."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--quiet", "-w", str(tmp_path)],
        check=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("attngeom-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "attngeom/py.typed" in names and "attngeom/report/plots.py" in names
    assert "attngeom/architectures/support.json" in names  # without it no discovered type is scored
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License-Expression: MIT" in metadata and "Author: attngeom contributors" in metadata
    assert re.search(
        r"Project-URL: Paper code, https://github.com/matteosaponati/attention-geometry", metadata
    )
    for license_file in ROOT.glob("LICEN[CS]E*"):
        assert any(n.endswith(f"licenses/{license_file.name}") for n in names), license_file.name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    python = tmp_path / "venv" / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)],
        check=True,
        timeout=300,
    )
    code = "import attngeom, pathlib; print(attngeom.__version__, pathlib.Path(attngeom.__file__).parent)"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    version, folder = out.stdout.split()
    assert (
        version == PROJECT["version"] and str(tmp_path / "venv") in folder
    )  # the wheel's, not the checkout's
