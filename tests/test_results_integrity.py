"""``load_results`` on a damaged results folder (issue 32, point 7): whatever is wrong with one of its files
(empty, cut short, random bytes, an HTML page, another format, a column missing, not UTF-8, a heatmap that
is pickled, 1-d or missing a key) is one ``InputError`` naming that file; a model listed twice in
``models.csv`` or a score row written twice is refused, not joined into doubled rows."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conformance import build, tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sources_reliability import LLAMA  # the tiny Llama the source tests share

import attngeom
from attngeom.errors import InputError
from attngeom.record_files import digest_path
from attngeom.records import write_scores
from attngeom.report.results_folder import load_results
from attngeom.report.summary import summarize, write_record_csv

FILES = ["aggregate/scores.parquet", "aggregate/models.csv", "tables/summary.csv", "heatmaps/encoder.npz"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A results folder as the pipeline writes one: a tiny Llama scored, its model row, the summary, a
    heatmap panel."""
    root = tmp_path_factory.mktemp("results")
    build(tiny_config("llama", **LLAMA)).save_pretrained(root / "m")
    scores = attngeom.score(root / "m", progress=False, model_id="org/m")
    folder = root / "results"
    for part in ("aggregate", "tables", "heatmaps"):
        (folder / part).mkdir(parents=True)
    write_scores(scores, folder / FILES[0])
    row = {"model": "org/m", "display": "m", "family": "org", "modality": "language", "objective": "decoder"}
    row |= {"role": "pretrained", "groups": ["table_s2"], "n_params": 1, "slug": "org--m", "status": "ok"}
    write_record_csv(pd.DataFrame([row | {"reason": ""}]), folder / FILES[1])
    write_record_csv(summarize(scores[scores["head"].isna()]).reset_index(), folder / FILES[2])
    np.savez(folder / FILES[3], matrix=np.eye(3), reason=np.array(""), title=np.array("m: layer 0"))
    return folder


def test_the_folder_loads_as_written(results):
    loaded = load_results(results)
    assert len(loaded.layers) == LLAMA["num_hidden_layers"] and loaded.heatmaps[0][0] == "m: layer 0"


def _parquet_of(frame: pd.DataFrame) -> bytes:
    with tempfile.NamedTemporaryFile(suffix=".parquet") as file:
        frame.to_parquet(file.name)
        return Path(file.name).read_bytes()


def damaged(name: str, data: bytes, damage: str, cut: float, noise: bytes) -> bytes:
    """``data`` (the bytes of ``name``) damaged as ``damage`` says."""
    if damage == "empty":
        return b""
    if damage == "cut short":
        return data[: int(len(data) * cut)]
    if damage == "random bytes":
        return noise
    if damage == "html":
        return b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>\n"
    if damage == "not utf-8":
        return data[: int(len(data) * cut)] + b"\xff\xfe" + noise + data[int(len(data) * cut) :]
    if damage == "another format":
        return (
            _parquet_of(pd.DataFrame({"x": [1, 2]})) if not name.endswith(".parquet") else b"model,x\na,1\n"
        )
    raise AssertionError(damage)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(FILES),
    damage=st.sampled_from(["empty", "cut short", "random bytes", "html", "not utf-8", "another format"]),
    cut=st.floats(0.0, 1.0),
    noise=st.binary(max_size=300),
)
def test_a_damaged_file_is_one_error_naming_it(results, name, damage, cut, noise):
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "results"
        shutil.copytree(results, folder)
        path = folder / name
        path.write_bytes(damaged(name, path.read_bytes(), damage, cut, noise))
        try:
            load_results(folder)
        except InputError as err:
            assert "\n" not in str(err) and str(path) in str(err), str(err)


@pytest.mark.parametrize(
    ("name", "edit", "words"),
    [
        ("aggregate/models.csv", lambda f: pd.concat([f, f]), "the model model='org/m' is there twice"),
        ("aggregate/scores.parquet", lambda f: pd.concat([f, f.iloc[:1]]), "the score row model_id='org/m'"),
        ("aggregate/models.csv", lambda f: f.drop(columns="model"), "no column 'model'"),
        ("aggregate/scores.parquet", lambda f: f.drop(columns="layer"), "no column 'layer'"),
    ],
    ids=["model twice", "score row twice", "no model column", "no layer column"],
)
def test_repeated_models_or_rows_and_missing_columns_are_refused(results, tmp_path, name, edit, words):
    folder = tmp_path / "results"
    shutil.copytree(results, folder)
    path = folder / name
    if name.endswith(".csv"):  # written by hand: no digest beside it, so its rows are what is checked
        edit(pd.read_csv(path)).to_csv(path, index=False)
        digest_path(path).unlink()
    else:
        edit(pd.read_parquet(path)).to_parquet(path)
    with pytest.raises(InputError, match=f"^{path}: .*{words}") as caught:
        load_results(folder)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "arrays",
    [
        {"matrix": np.array([{"a": 1}], dtype=object), "reason": np.array(""), "title": np.array("t")},
        {"matrix": np.eye(3), "title": np.array("t")},
        {"matrix": np.arange(3.0), "reason": np.array(""), "title": np.array("t")},
        {"matrix": np.array([["a", "b"]]), "reason": np.array(""), "title": np.array("t")},
    ],
    ids=["pickled", "no reason", "1-d", "strings"],
)
def test_a_heatmap_that_is_not_a_matrix_is_one_error(results, tmp_path, arrays):
    folder = tmp_path / "results"
    shutil.copytree(results, folder)
    np.savez(folder / FILES[3], **arrays)
    with pytest.raises(InputError, match=f"^{folder / FILES[3]}: "):
        load_results(folder)
