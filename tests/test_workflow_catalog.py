"""The workflow as the Snakemake workflow catalog expects it: workflow/Snakefile, a test config, a config
page naming every key, a license; usable as a module of another workflow, whose DAG Snakemake builds
without torch, pandas or pyarrow; the top-level Snakefile as the entry point from the repository's root;
a figure of pretrained models that does not wait for training."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from pipeline_support import planned_jobs
from snakemake.common import SNAKEFILE_CHOICES

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "workflow" / "schemas"

NO_HEAVY_IMPORTS = """
import builtins
import importlib
import os
import sys

from snakemake.cli import main  # Snakemake and its plugins first (the SLURM plugin imports pandas itself)

HEAVY = {"torch", "pandas", "pyarrow"}
plain_import, plain_import_module = builtins.__import__, importlib.import_module


def by_the_workflow(depth):
    # code of the workflow: its Snakefile and rules, and attngeom (Snakemake's own use of pandas is its own)
    name = sys._getframe(depth).f_code.co_filename
    return name.endswith(("Snakefile", ".smk")) or f"{os.sep}attngeom{os.sep}" in name


def refused(name, depth):
    if name.split(".")[0] in HEAVY and by_the_workflow(depth + 1):
        raise ModuleNotFoundError(f"the workflow imported {name}")


def refusing_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level == 0:
        refused(name, 2)
    return plain_import(name, globals, locals, fromlist, level)


def refusing_import_module(name, package=None):
    refused(name, 2)
    return plain_import_module(name, package)


builtins.__import__, importlib.import_module = refusing_import, refusing_import_module
# attngeom not installed where Snakemake runs: the workflow finds its checkout's own copy
sys.path[:] = [p for p in sys.path if Path(p).resolve() != Path(ROOT, "src")]
sys.argv = ["snakemake", *sys.argv[1:]]
main()
"""
"""Snakemake, refusing torch, pandas and pyarrow to the workflow, with no attngeom on its path."""


def snakemake(*args: str, cwd: Path, wrapper: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    start = (
        ["-c", f"from pathlib import Path\nROOT = {str(ROOT)!r}\n{wrapper}"]
        if wrapper
        else ["-m", "snakemake"]
    )
    return subprocess.run([sys.executable, *start, *args], cwd=cwd, env=env, capture_output=True, text=True)


def schema_keys(node: object) -> set[str]:
    """Every property name of a schema, its $defs and the schema files it refers to."""
    keys: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties":
                keys |= set(value)
            keys |= schema_keys(value)
    elif isinstance(node, list):
        for value in node:
            keys |= schema_keys(value)
    return keys


def test_config_readme_names_every_key_of_the_schema():
    text = (ROOT / "config" / "README.md").read_text()
    keys = set().union(*(schema_keys(yaml.safe_load(p.read_text())) for p in SCHEMAS.glob("*.yaml")))
    assert len(keys) > 60
    assert sorted(k for k in keys if f"`{k}`" not in text) == []


def test_catalog_files():
    assert (ROOT / "workflow" / "Snakefile").is_file() and (
        ROOT / "workflow" / "profiles" / "default"
    ).is_dir()
    # the entry point at the top level includes the catalog's workflow/Snakefile, and nothing else
    entry = [line for line in (ROOT / "Snakefile").read_text().splitlines() if line and line[0] != "#"]
    assert entry == ['include: "workflow/Snakefile"']
    # Snakemake looks for the workflow's own profile beside the Snakefile it runs: both find the same one
    assert (ROOT / "profiles" / "default").resolve() == (ROOT / "workflow" / "profiles" / "default").resolve()
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    usage = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert usage["software-stack-deployment"]["conda"] and usage["report"]
    assert yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())["models"]


def test_the_test_config_runs_as_a_module_of_another_workflow_without_torch_pandas_or_pyarrow(tmp_path):
    (tmp_path / "Snakefile").write_text(
        f'configfile: "{ROOT / ".test" / "config" / "config.yaml"}"\n\n\n'
        f'module attngeom:\n    snakefile:\n        "{ROOT / "workflow" / "Snakefile"}"\n'
        "    config:\n        config\n\n\n"
        "use rule * from attngeom\n"
    )
    done = snakemake("-n", "all", cwd=tmp_path, wrapper=NO_HEAVY_IMPORTS)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    jobs = {rule for rule, _, _ in planned_jobs(done.stdout)}
    assert {"random_model", "score", "train", "aggregate", "figure_s1", "figure_s2", "all"} <= jobs
    # the scoring and training jobs record what they took (Snakemake's benchmark TSVs)
    assert "benchmark: results/benchmarks/score/random--bert.tsv" in done.stdout
    assert "benchmark: results/training/benchmarks/train/encoder-random.tsv" in done.stdout


def test_the_top_level_snakefile_is_the_entry_point_from_the_root(tmp_path):
    """`snakemake --profile profiles/slurm all` from the root, as the README runs it, reads ./Snakefile and
    the workflow's own profile, and plans the jobs that workflow/Snakefile plans."""
    args = ("-n", "--profile", "profiles/slurm", "all", "--configfile", ".test/config/config.yaml")
    entry = snakemake(*args[:4], "--directory", str(tmp_path / "entry"), *args[4:], cwd=ROOT)
    catalog = snakemake(
        "--snakefile", "workflow/Snakefile", *args[:4], "--directory", str(tmp_path / "catalog"), *args[4:],
        cwd=ROOT,
    )  # fmt: skip
    for done in (entry, catalog):
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert Path(SNAKEFILE_CHOICES[0]) == Path("Snakefile")  # what Snakemake reads first, where it exists
    assert "workflow specific profile profiles/default" in entry.stdout + entry.stderr

    def jobs(output: str) -> list[tuple[str, str, list[str]]]:
        return sorted(
            (rule, wildcards, sorted(res.split(", "))) for rule, wildcards, res in planned_jobs(output)
        )

    assert jobs(entry.stdout) == jobs(catalog.stdout)
    assert {"score", "train", "aggregate", "all"} <= {rule for rule, _, _ in planned_jobs(entry.stdout)}


def test_a_figure_of_pretrained_models_does_not_pull_training(tmp_path):
    # from the repository's root, as the README runs it: Snakemake finds the top-level Snakefile by itself
    done = snakemake("-n", "--directory", str(tmp_path), "results/figures/figure_s1.png", cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted(rule for rule, _, _ in planned_jobs(done.stdout))
    assert jobs == ["figure_s1", "random_model", "score"]  # the default config's ViT control only
