"""The notebook API: ``attngeom.summarize``, ``attngeom.load_results``, ``attngeom.plots``; the README's
example runs as written on a real (tiny) pipeline run with two tiny training runs beside it."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from pipeline_support import BROKEN_MODELS, ROOT
from training_fixtures import TINY, write_corpus

import attngeom
from attngeom.errors import InputError
from attngeom.training.config import make_config
from attngeom.training.loop import train

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def api_examples() -> list[str]:
    """The fenced Python blocks of the README and docs that use ``load_results``: the notebook example."""
    blocks = []
    for page in DOCS:
        blocks += re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.M | re.S)
    return [block for block in blocks if "load_results(" in block]


@pytest.fixture(scope="module")
def results(tiny_run, tmp_path_factory):
    """The tiny pipeline run's results, plus an encoder and a decoder trained for 4 steps under
    ``training/`` as the pipeline lays them out."""
    folder = tmp_path_factory.mktemp("api") / "results"
    folder.mkdir()
    for part in ("aggregate", "tables", "heatmaps"):
        (folder / part).symlink_to(tiny_run / "results" / part)
    corpus = write_corpus(folder.parent, 200)
    for objective in ("encoder", "decoder"):
        settings = dict(TINY, dataset=str(corpus), cache_dir=str(folder.parent / "cache"), batch_size=2)
        settings.update(grad_accum=1, steps=4, score_every=2, log_every=1, objective=objective)
        train(make_config(settings, {}), folder / "training" / f"{objective}-random", progress=False)
    return folder


@pytest.mark.slow  # the tiny pipeline run (tiny_run), minutes on 2 cores
def test_the_readme_example_runs_as_written(results):
    (example,) = api_examples()
    out = subprocess.run(
        [sys.executable, "-c", example], cwd=results.parent, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for name in ("figure_2.png", "figure_s1.png", "evolution.png"):
        assert (results.parent / name).stat().st_size > 1000, name
    assert "symmetry median" in out.stdout


@pytest.mark.slow  # the tiny pipeline run (tiny_run), minutes on 2 cores
def test_load_results_joins_roles_and_statuses_onto_the_rows(results, tiny_run):
    loaded = attngeom.load_results(results)
    scores = pd.read_parquet(tiny_run / "results" / "aggregate" / "scores.parquet")
    assert len(loaded.heads) + len(loaded.layers) == len(scores)
    assert loaded.heads["head"].notna().all() and loaded.layers["head"].isna().all()
    assert set(loaded.layers["status"]) == {"ok"}  # only scored models have rows
    roles = loaded.models.set_index("model")["role"]  # each row carries its model's role
    assert (loaded.layers["role"] == loaded.layers["model_id"].map(roles)).all()
    assert set(loaded.layers["role"]) == {"random"}  # the tiny run scores random-weight models only
    failed = loaded.models[loaded.models["status"] != "ok"]
    assert set(BROKEN_MODELS) <= set(failed["model"]) and failed["reason"].str.len().gt(0).all()
    assert not set(failed["model"]) & set(loaded.layers["model_id"])  # listed with a reason, no rows
    assert set(loaded.training["run"]) == {"encoder-random", "decoder-random"}
    assert [title for title, _, _ in loaded.heatmaps] and all(
        matrix is None or isinstance(matrix, np.ndarray) for _, matrix, _ in loaded.heatmaps
    )


@pytest.mark.slow  # the tiny pipeline run (tiny_run), minutes on 2 cores
def test_summarize_is_the_median_and_iqr_over_layers(results):
    layers = attngeom.load_results(results).layers
    table = attngeom.summarize(layers)
    model, stack = table.index[0]
    rows = layers[(layers["model_id"] == model) & (layers["stack"] == stack)]["symmetry"]
    assert table.loc[(model, stack), "symmetry median"] == pytest.approx(rows.median(), abs=1e-12)
    iqr = rows.quantile(0.75) - rows.quantile(0.25)
    assert table.loc[(model, stack), "symmetry IQR"] == pytest.approx(iqr, abs=1e-12)
    assert table.loc[(model, stack), "layers"] == len(rows)


@pytest.mark.slow  # the tiny pipeline run (tiny_run), minutes on 2 cores
def test_plots_return_figures_and_write_nothing(results, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loaded = attngeom.load_results(results)
    figure = attngeom.plots.figure_2(loaded)
    assert isinstance(figure, Figure) and len(figure.axes) >= 4  # scatter, controls and heatmaps, two rows
    assert isinstance(attngeom.plots.figure_s2(loaded.summary), Figure)
    evolution = attngeom.plots.evolution(loaded, dataset="corpus", layers=TINY["n_layers"])
    assert sum(1 for ax in evolution.axes if ax.get_title()) == 6
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InputError, match="name one dataset and depth"):
        attngeom.plots.evolution(loaded, dataset="elsewhere")


def test_a_folder_without_results_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match="no aggregate/scores.parquet; run the pipeline first"):
        attngeom.load_results(tmp_path)


def test_import_attngeom_stays_light():
    code = "import sys, attngeom; attngeom.summarize; print(sorted({'torch', 'transformers', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


def test_form_is_exported_lazily_as_the_scores_module_defines_it():
    code = (
        "import sys, attngeom; print('torch' in sys.modules); from attngeom.scores import Form; "
        "print(attngeom.Form is Form, 'Form' in attngeom.__all__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True", "True"], out.stderr
