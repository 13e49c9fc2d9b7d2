"""Reruns that follow the code by wing: the records carry the hash of the scoring wing (attngeom.provenance:
a declared set of folders and data files), every rule takes the hash of its script and of the wings it runs
as a param, and the workflow's profile reruns on params, not on the script's timestamp. Changing a file of
the scoring wing (a module of the engine, the architecture maps' support.json) reruns the scoring jobs and
trains nothing; changing the training code trains again; changing the mathematics the regulariser
differentiates does both; a change outside every wing (the console summary, GPU locks, the CLI), a comment,
a docstring, or a file touched with identical content reruns nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pipeline_support import planned_jobs
from training_fixtures import TINY, write_corpus
from transformers import BertConfig, BertModel

from attngeom import provenance
from attngeom.provenance import WINGS, code_hash, normalised, rule_hash, wing_files

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attngeom"
SUPPORT = "architectures/support.json"


def package_copy(folder: Path, change: dict[str, str] | None = None) -> Path:
    """A copy of the package, each file of ``change`` (path inside the package → text) appended to (made)."""
    copy = shutil.copytree(PACKAGE, folder / "attngeom", ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in (change or {}).items():
        with open(copy / name, "a") as file:
            file.write(text)
    return copy


def regenerate_support(package: Path) -> Path:
    """``package`` with its support.json saying another reason for one type (as a conformance run might)."""
    support = json.loads((package / SUPPORT).read_text())
    next(iter(support["types"].values()))["reason"] += " (regenerated)"
    (package / SUPPORT).write_text(json.dumps(support, indent=1) + "\n")
    return package


def test_the_hashes_follow_the_wings_files_not_their_bytes_or_timestamps(tmp_path):
    same = package_copy(tmp_path / "same", {"architectures/.table.py.swp": "x"})  # an editor's file
    later = time.time() + 100
    for path in same.rglob("*.py"):
        os.utime(path, (later, later))
    # a comment, a docstring and an attribute docstring, and a reformatted statement: the same code
    scores_py = (PACKAGE / "scores.py").read_text()
    assert "GAMMA = 2.0\n" in scores_py
    reworded = package_copy(
        tmp_path / "reworded", {"scores.py": '\n# a comment\n"""A string that does nothing."""\n'}
    )
    (reworded / "scores.py").write_text(
        '"""Another module docstring."""\n'
        + (reworded / "scores.py").read_text().replace("GAMMA = 2.0\n", "GAMMA = (\n    2.0\n)\n")
    )
    statement = "\nCHANGED = 1\n"
    math = package_copy(tmp_path / "math", {"scores.py": statement})
    engine = package_copy(tmp_path / "engine", {"engine.py": statement})
    new_map = package_copy(tmp_path / "new_map", {"architectures/new_family.py": statement})
    support = regenerate_support(package_copy(tmp_path / "support"))
    training = package_copy(tmp_path / "training", {"training/loop.py": statement})
    outside = {
        name: package_copy(tmp_path / name.replace("/", "_"), {name: statement})
        for name in ("report/summary.py", "report/score_figures.py", "cli.py", "pipeline/gpus.py", "files.py")
    }

    def hashes(package: Path) -> tuple[str, str, str, str]:
        """The scoring wing's, the training wing's, and the score and train rules' code params."""
        score_rule = rule_hash(ROOT / "scripts" / "score_model.py", ("scoring",), package)
        train_rule = rule_hash(ROOT / "scripts" / "train_run.py", ("training",), package)
        return code_hash("scoring", package), code_hash("training", package), score_rule, train_rule

    base = hashes(PACKAGE)

    def changed(package: Path) -> list[bool]:
        return [new != old for new, old in zip(hashes(package), base, strict=True)]

    assert changed(same) == changed(reworded) == [False] * 4
    assert changed(math) == [True] * 4  # the symmetry formula: the regulariser trains with it
    for scoring in (engine, new_map, support):  # rescore, do not retrain
        assert changed(scoring) == [True, False, True, False]
    assert changed(training) == [False, True, False, True]
    assert {name: changed(package) for name, package in outside.items()} == dict.fromkeys(
        outside, [False] * 4
    )


def test_each_wing_is_its_declared_files_and_a_stale_declaration_is_an_error(tmp_path):
    files = {wing: {p.relative_to(PACKAGE).as_posix() for p in wing_files(wing, PACKAGE)} for wing in WINGS}
    assert SUPPORT in files["scoring"] and "engine.py" in files["scoring"]
    assert "scores.py" in files["training"] and "training/loop.py" in files["training"]
    assert files["training"].isdisjoint(
        {"engine.py", "records.py", SUPPORT}
    )  # the runs' scores carry their own
    assert not any(name.startswith(("cli", "report/", "pipeline/")) for name in files["scoring"])
    package = package_copy(tmp_path / "p")
    (package / "engine.py").unlink()
    with pytest.raises(FileNotFoundError, match="'scoring' names engine.py"):
        provenance.wing_files("scoring", package)


def normalised_text(folder: Path, name: str, text: str) -> bytes:
    """``normalised`` of ``text`` written to ``folder``/``name``."""
    (folder / name).write_text(text)
    return normalised(folder / name)


def test_a_string_that_is_a_value_is_code(tmp_path):
    """Only string *statements* are dropped: a string that is assigned, returned or passed is kept."""

    def tree(name: str, text: str) -> bytes:
        return normalised_text(tmp_path, name, text)

    base = tree("a.py", 'X = "a"\n')
    assert tree("b.py", 'X = "b"\n') != base
    assert tree("c.py", '"""doc"""\nX = "a"  # note\n"""after"""\n') == base
    assert tree("d.py", 'def f():\n    "doc"\n    return "a"\n') != tree("e.py", 'def f():\n    return "b"\n')


def test_the_normalised_code_prints_no_empty_field_so_it_reads_the_same_on_every_python(tmp_path):
    """Each Python release may add fields to the syntax tree (3.12: ``type_params``, empty on every plain
    function), and ``ast.dump`` prints them: a hash of it would differ between a cluster's Python and a
    laptop's for the same file (runs trained on 3.12.3 were "other scoring code" on 3.11.7)."""
    code = normalised_text(tmp_path, "m.py", "class A:\n    def f(self, x):\n        return x + 1\n")
    text = code.decode()
    assert "FunctionDef(name='f'" in text and "BinOp(" in text
    assert "=[]" not in text and "=None" not in text
    assert code != normalised_text(tmp_path, "n.py", "class A:\n    def f(self, x):\n        return x\n")


def tiny_bert(folder: Path) -> Path:
    config = BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=50
    )
    BertModel(config).save_pretrained(folder)
    return folder


SCORE_AND_LIST = """
import json, sys
from attngeom.pipeline.outcome import ScoreJob, score_and_record
job = ScoreJob("local/tiny", sys.argv[1], "", sys.argv[2], sys.argv[3], sys.argv[4])
score_and_record(job)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "attngeom")))
"""


def test_a_scoring_job_runs_the_engine_not_the_cli_or_the_report_and_its_records_carry_the_wings_hash(
    tmp_path,
):
    model = tiny_bert(tmp_path / "model")
    files = [str(tmp_path / name) for name in ("s.parquet", "s.status.json", "s.log")]
    done = subprocess.run(
        [sys.executable, "-c", SCORE_AND_LIST, str(model), *files], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert json.loads(Path(files[1]).read_text())["status"] == "ok"
    assert {"attngeom.engine", "attngeom.scores", "attngeom.architectures.discovery.validated"} <= loaded
    parts = ("attngeom.cli", "attngeom.report", "attngeom.runstats", "attngeom.training")
    assert sorted(m for m in loaded if m.startswith(parts)) == []
    assert set(pd.read_parquet(files[0])["code_hash"]) == {code_hash("scoring")}


def workflow_copy(tmp_path: Path, config: dict, targets: list[str]) -> Callable[..., str]:
    """A copy of the workflow and its package, whose code a test may change, and a function that runs
    Snakemake on it for ``targets`` with ``config`` (returning its output)."""
    repo = tmp_path / "repo"
    for part in ("workflow", "scripts", "config", "envs", "src"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "c.yaml").write_text(yaml.safe_dump({"results": "results", **config}))
    env = dict(os.environ, PYTHONPATH=str(repo / "src"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")

    def snakemake(*args: str) -> str:
        command = [sys.executable, "-m", "snakemake", "--snakefile", str(repo / "workflow" / "Snakefile")]
        command += [*targets, *args, "--configfile", "c.yaml"]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout + done.stderr

    return snakemake


def test_a_change_in_the_scoring_wing_reruns_the_scoring_job_and_nothing_outside_it_does(tmp_path):
    model = {"id": "local/tiny", "path": str(tiny_bert(tmp_path / "model")), "objective": "bidirectional"}
    target = "results/scores/local--tiny.parquet"
    snakemake = workflow_copy(tmp_path, {"models": [model]}, [target])
    repo, work = tmp_path / "repo", tmp_path / "work"
    package = repo / "src" / "attngeom"

    snakemake("--cores", "1")
    recorded = set(pd.read_parquet(work / target)["code_hash"])
    assert recorded == {code_hash("scoring", package)}
    assert "Nothing to be done" in snakemake("-n")

    later = time.time() + 100  # identical content, a new timestamp: the script and a module
    for path in (repo / "scripts" / "score_model.py", package / "scores.py"):
        os.utime(path, (later, later))
    assert "Nothing to be done" in snakemake("-n")

    with open(package / "scores.py", "a") as file:
        file.write('\n# a comment\n"""and a string statement: no code"""\n')
    assert "Nothing to be done" in snakemake("-n")

    summary = package / "report" / "summary.py"  # what `attngeom score` prints: outside the wing
    summary.write_text('"""Another docstring."""\n' + summary.read_text() + "\nCHANGED = 1\n")
    assert "Nothing to be done" in snakemake("-n")

    regenerate_support(package)
    output = snakemake("-n")
    assert [rule for rule, _, _ in planned_jobs(output)] == ["score"]
    assert "Params have changed" in output


@pytest.mark.slow  # a training run, its scoring and tables, then three more pipeline runs (about a minute)
def test_a_scoring_change_rescores_the_trained_model_names_its_older_evolution_and_trains_nothing(tmp_path):
    """One tiny training run: a changed scoring module plans the scoring and table jobs, no training; the
    claims table then names the run whose evolution older scoring code computed, until
    `snakemake --profile profiles/local all --forcerun train` (here for the test's targets) trains it again. A changed training
    loop trains it again."""
    model = {"id": "local/tiny", "path": str(tiny_bert(tmp_path / "model")), "objective": "bidirectional"}
    defaults = {
        **TINY,
        **{"batch_size": 4, "grad_accum": 1, "steps": 4, "warmup_steps": 1, "threads": 1, "device": "cpu"},
        **{"log_every": 2, "score_every": 2, "checkpoint_every": 4},
        **{"dataset": str(write_corpus(tmp_path)), "cache_dir": str(tmp_path / "cache")},
    }
    training = {"defaults": defaults, "runs": [{"name": "enc", "objective": "encoder", "init": "random"}]}
    claims = "results/training/tables/claims.md"
    targets = [claims, "results/scores/trained--enc.parquet"]
    snakemake = workflow_copy(tmp_path, {"models": [model], "training": training}, targets)
    package, work = tmp_path / "repo" / "src" / "attngeom", tmp_path / "work"
    evolution = work / "results" / "training" / "enc" / "scores.parquet"

    snakemake("--cores", "1")
    before = code_hash("scoring", package)
    assert set(pd.read_parquet(evolution)["code_hash"]) == {before}
    assert "other scoring code" not in (work / claims).read_text()

    with open(package / "engine.py", "a") as file:
        file.write("\nCHANGED = 1\n")
    planned = [rule for rule, _, _ in planned_jobs(snakemake("-n"))]
    assert sorted(planned) == ["score", "training_tables"]
    snakemake("--cores", "1")
    assert "The evolution scores of 1 of 1 runs (enc) were computed by other scoring code" in " ".join(
        (work / claims).read_text().split()
    )

    snakemake("--cores", "1", "--forcerun", "train")
    assert len(list(evolution.parent.parent.glob("enc.replaced-*"))) == 1  # moved aside, never overwritten
    now = set(pd.read_parquet(work / targets[1])["code_hash"])  # the final model, rescored
    assert now != {before} and set(pd.read_parquet(evolution)["code_hash"]) == now
    assert "other scoring code" not in (work / claims).read_text()

    with open(package / "training" / "loop.py", "a") as file:
        file.write("\nCHANGED = 1\n")
    assert sorted(rule for rule, _, _ in planned_jobs(snakemake("-n"))) == [
        "score",
        "train",
        "training_tables",
    ]
