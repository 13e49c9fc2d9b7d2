"""The scores a run records as it trains carry the hash of the scoring code that computed them: a finished
run whose scores other scoring code computed is trained again only when its job is forced (the pipeline's
`restart="if-changed"`), an unfinished one resumes with each row marked, and the figures that draw the
evolution name such runs (tests/test_workflow_reruns.py runs the same through Snakemake)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_paper_figures import drawn_beyond_the_figure
from training_fixtures import tiny, write_corpus

from attngeom.provenance import code_hash
from attngeom.report.scoring_code import REFRESH, other_code_note, other_code_runs
from attngeom.report.training_figures import evolution_figure, load_runs, official_figure
from attngeom.training.loop import train

ROOT = Path(__file__).resolve().parents[1]
CURRENT = code_hash("scoring")


def as_if_older(run: Path, steps: int | None = None) -> None:
    """Mark the run's recorded scores (up to ``steps``, or all) as computed by other scoring code."""
    rows = pd.read_parquet(run / "scores.parquet")
    older = rows["step"] <= (rows["step"].max() if steps is None else steps)
    rows.loc[older, "code_hash"] = "older"
    rows.to_parquet(run / "scores.parquet", index=False)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple:
    """A tiny finished run (2 steps, scored at every one) and its settings."""
    folder = tmp_path_factory.mktemp("runs")
    config = tiny(folder, write_corpus(folder), steps=2, grad_accum=1, score_every=1)
    return train(config, folder / "run", progress=False), config


def test_a_finished_run_of_other_scoring_code_is_trained_afresh_and_an_unfinished_one_resumes(
    finished, tmp_path
):
    run, config = finished
    current = shutil.copytree(run, tmp_path / "current")
    train(config, current, progress=False, restart="if-changed")  # a forced job: resumed at its end
    assert not list(tmp_path.glob("current.replaced-*"))

    older = shutil.copytree(run, tmp_path / "older")
    as_if_older(older)
    train(config, older, progress=False)  # the CLI's default: resume whatever the code
    assert not list(tmp_path.glob("older.replaced-*"))
    as_if_older(older)
    train(config, older, progress=False, restart="if-changed")  # the pipeline's: train afresh
    assert len(list(tmp_path.glob("older.replaced-*"))) == 1
    assert set(pd.read_parquet(older / "scores.parquet")["code_hash"]) == {CURRENT}

    half = train(config, tmp_path / "half", progress=False, stop_at=1)
    as_if_older(half)
    train(config, half, progress=False, restart="if-changed")  # resumed: step 0 older, 1 and 2 current
    rows = pd.read_parquet(half / "scores.parquet").drop_duplicates("step")
    assert not list(tmp_path.glob("half.replaced-*"))
    assert rows.set_index("step")["code_hash"].to_dict() == {0: "older", 1: CURRENT, 2: CURRENT}


def test_the_evolution_figures_name_the_runs_of_other_scoring_code(finished, tmp_path):
    run, _ = finished
    older = shutil.copytree(run, tmp_path / "older-run")
    as_if_older(older, steps=0)
    scores, _ = load_runs([run, older])
    assert other_code_runs(scores) == ["older-run"] and other_code_runs(scores, "older") == [
        "older-run",
        "run",
    ]
    note = other_code_note(scores)
    assert note.startswith("The evolution scores of 1 of 2 runs (older-run) were computed by other")
    assert REFRESH in note and other_code_note(scores[scores["run"] == "run"]) == ""

    label = scores["dataset"].iloc[0]
    fig = evolution_figure(scores, label, 2, None)
    assert " ".join(fig.get_supxlabel().split()) == note
    assert drawn_beyond_the_figure(fig, tmp_path / "evolution.png") == []
    official = pd.read_csv(ROOT / "config" / "reference" / "official_training_evolution.csv")
    fig = official_figure(scores, official, tmp_path / "official")
    assert " ".join(fig.get_supxlabel().split()) == note
    assert evolution_figure(scores[scores["run"] == "run"], label, 2, None).get_supxlabel() == ""
