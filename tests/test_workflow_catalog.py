"""The workflow as the Snakemake workflow catalog expects it: workflow/Snakefile, a test config, a config
page naming every key, a license; usable as a module of another workflow, whose DAG Snakemake builds
without torch, pandas or pyarrow; the top-level Snakefile as the entry point from the repository's root;
a figure of pretrained models that does not wait for training."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from pipeline_support import planned_jobs
from snakemake.common import SNAKEFILE_CHOICES

from attngeom.pipeline.conda_env import checkout_env

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
    assert entry == ['include: "workflow/Snakefile"', 'workflow.default_target = "all"']
    # Snakemake looks for the workflow's own profile beside the Snakefile it runs: both find the same one
    assert (ROOT / "profiles" / "default").resolve() == (ROOT / "workflow" / "profiles" / "default").resolve()
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    usage = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert usage["software-stack-deployment"]["conda"] and usage["report"]
    assert yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())["models"]


def test_the_catalog_s_command_with_no_flags_plans_the_test_config(tmp_path):
    """The catalog runs `snakemake --directory .test` from the root with no --configfile (its card says
    "mandatory flags: none"): the workflow reads the working directory's config/config.yaml, so the jobs
    are .test's (three random controls, one tiny training run), not the embedded default's."""
    usage = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())["usage"]
    assert usage["mandatory-flags"]["flags"] in ("", None)
    shutil.copytree(
        ROOT / ".test", tmp_path / ".test", ignore=shutil.ignore_patterns("results", ".snakemake")
    )
    done = snakemake("--directory", str(tmp_path / ".test"), "-n", cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    jobs = planned_jobs(done.stdout)
    test_config = yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())
    listed = {f"slug={m['id'].replace('/', '--')}" for m in test_config["models"]}
    assert {w for rule, w, _ in jobs if rule == "score"} == listed | {"slug=trained--encoder-random"}
    assert {w for rule, w, _ in jobs if rule == "train"} == {"run=encoder-random"}


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
    """`snakemake --profile profiles/slurm` from the root, as the README runs it, reads ./Snakefile and the
    workflow's own profile, and plans the jobs that workflow/Snakefile plans for `all`: with no target too
    (Snakemake forgets an included file's default target; the entry point names it again)."""
    args = ("-n", "--profile", "profiles/slurm", "all", "--configfile", ".test/config/config.yaml")
    entry = snakemake(*args[:3], "--directory", str(tmp_path / "entry"), *args[4:], cwd=ROOT)
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


MODULE_REPORTING_THE_CHECKOUT = """
configfile: "{config}"


module attngeom:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from attngeom


rule checkout:
    output:
        "checkout.txt",
    run:
        Path(output[0]).write_text(os.environ["ATTNGEOM_CHECKOUT"])
"""


def test_the_workflow_used_as_a_module_tells_its_jobs_where_its_checkout_is(tmp_path):
    """`--sdm conda` runs envs/attngeom.post-deploy.sh in Snakemake's working directory, which is another
    workflow's folder (module) or .test (--directory), not the checkout: the workflow exports the checkout's
    path to the processes Snakemake starts, the post-deploy step's included."""
    module = tmp_path / "module"
    module.mkdir()
    (module / "Snakefile").write_text(
        "import os\nfrom pathlib import Path\n"
        + MODULE_REPORTING_THE_CHECKOUT.format(
            config=ROOT / ".test" / "config" / "config.yaml", snakefile=ROOT / "workflow" / "Snakefile"
        )
    )
    done = snakemake("--cores", "1", "checkout.txt", cwd=module)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert Path((module / "checkout.txt").read_text()) == ROOT


STAND_IN_CONDA = """#!/usr/bin/env bash
# conda as far as Snakemake asks before it creates an environment: its version, info and channel priority
case "$1 $2" in
  "--version "*) echo "conda 25.1.0" ;;
  "info --json") echo '{"conda_version": "25.1.0", "platform": "linux-64", "conda_prefix": "/opt/conda"}' ;;
  "config --get") echo '{"get": {"channel_priority": "strict"}}' ;;
  *) echo "stand-in conda: cannot $*" >&2; exit 1 ;;
esac
"""
"""conda is not installed on the test machines (nor reachable offline): this stand-in answers the three
queries Snakemake makes before naming environments, so `--list-conda-envs` shows Snakemake's own naming."""


def test_each_checkout_gets_an_environment_of_its_own_and_keeps_it(tmp_path):
    """The copy the workflow hands Snakemake names its checkout: another checkout's copy differs only in
    that line (so, in a shared --conda-prefix, an environment of its own), the same checkout's is the same
    byte for byte wherever it is written (so its environment is reused), the post-deploy step beside it."""
    env_file = ROOT / "envs" / "attngeom.yaml"
    first = checkout_env(env_file, ROOT, tmp_path / "a")
    again = checkout_env(env_file, ROOT, tmp_path / "b")
    other = checkout_env(env_file, tmp_path / "clone", tmp_path / "a")
    assert first.read_text() == again.read_text() != other.read_text()
    assert (
        first.read_text().splitlines()[1:]
        == other.read_text().splitlines()[1:]
        == env_file.read_text().splitlines()
    )
    assert str(ROOT) in first.read_text().splitlines()[0]
    deploy = first.with_name("attngeom.post-deploy.sh")
    assert deploy.read_text() == (ROOT / "envs" / "attngeom.post-deploy.sh").read_text()


@pytest.mark.slow  # three DAGs of the default config: 15-45 s on 2 cores, by load
def test_snakemake_names_two_clones_environments_apart_in_a_shared_prefix(tmp_path):
    """Snakemake's own names (`--list-conda-envs`, conda stood in for): one clone run from two working
    directories has one environment; a second clone of the same files, in the same --conda-prefix, another."""
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(ROOT / "Snakefile", clone / "Snakefile")
    for part in ("workflow", "envs", "config", "scripts", "profiles"):
        shutil.copytree(ROOT / part, clone / part, symlinks=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "conda").write_text(STAND_IN_CONDA)
    (bin_dir / "conda").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", HF_HUB_OFFLINE="1")
    prefix = tmp_path / "shared-prefix"

    def environment(checkout: Path, workdir: Path) -> str:
        args = ["--snakefile", str(checkout / "workflow" / "Snakefile"), "--directory", str(workdir)]
        args += ["--sdm", "conda", "--conda-prefix", str(prefix), "--list-conda-envs"]
        done = subprocess.run(
            [sys.executable, "-m", "snakemake", *args], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (row,) = [line.split("\t") for line in done.stdout.splitlines() if "attngeom.yaml" in line]
        return Path(row[-1]).name

    here = environment(ROOT, tmp_path / "work-1")
    assert environment(ROOT, tmp_path / "work-2") == here
    assert environment(clone, tmp_path / "work-3") != here


@pytest.mark.slow
def test_the_conda_post_deploy_step_installs_the_checkout_from_snakemake_s_working_directory(tmp_path):
    """The step as Snakemake runs it after creating the environment (conda cannot be reached here): its own
    copy of the script, run by the environment's interpreter in Snakemake's working directory, with the
    environment Snakemake inherited from the workflow. The environment is a fresh venv holding what
    envs/attngeom.yaml gives the script: python, pip and this setuptools (the pinned one)."""
    import setuptools

    assert f"setuptools =={setuptools.__version__}" in (ROOT / "envs" / "attngeom.yaml").read_text()
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    site = next(env.glob("lib/python*/site-packages"))
    here = Path(setuptools.__file__).parent.parent
    for name in ("setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth"):
        source = here / name
        if source.is_dir():
            shutil.rmtree(site / name, ignore_errors=True)
            shutil.copytree(source, site / name)
        elif source.is_file():
            shutil.copy(source, site / name)
    working = tmp_path / "dot-test"  # Snakemake's working directory: not the checkout
    working.mkdir()
    script = tmp_path / "conda" / "0123abcd_.post-deploy.sh"  # Snakemake's copy beside the environment
    script.parent.mkdir()
    shutil.copy(ROOT / "envs" / "attngeom.post-deploy.sh", script)
    path = f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}"
    plain = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def post_deploy(**extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", str(script)], cwd=working, env=dict(plain, PATH=path, **extra),
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    refused = post_deploy()  # not started by the workflow: one line, nothing installed
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "ATTNGEOM_CHECKOUT" in refused.stderr
    done = post_deploy(ATTNGEOM_CHECKOUT=str(ROOT))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    where = subprocess.run(
        [str(env / "bin" / "python"), "-c", "import attngeom; print(attngeom.__file__)"],
        cwd=tmp_path, env=plain, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert Path(where.stdout.strip()) == ROOT / "src" / "attngeom" / "__init__.py"
