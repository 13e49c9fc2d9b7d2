"""Damage in a record file is an error naming it, never data (issue 43, point 5): single-bit flips anywhere in
a scores file (page checksums and a content digest, verified on read), an edited summary or loss log,
and loss logs with a step twice, out of order or missing. Drifted files are checked against the one
schema (point 8): a column of another kind, missing or out of range, an unknown status, a heatmap of
absurd size, a frame given to ``summarize`` that is not score rows."""

from __future__ import annotations

import io
import random
import shutil
import zipfile

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conformance import build, tiny_config
from test_sources_reliability import LLAMA  # the tiny Llama the source tests share
from training_fixtures import tiny, write_corpus

import attngeom
from attngeom.errors import InputError
from attngeom.record_files import DamagedRecord, digest_path
from attngeom.records import read_scores, write_scores
from attngeom.report.results_folder import load_results
from attngeom.report.summary import read_table, summarize, write_record_csv
from attngeom.runstats.table1 import table1
from attngeom.training.bookkeeping import read_loss_log
from attngeom.training.loop import train


@pytest.fixture(scope="module")
def scores(tmp_path_factory) -> pd.DataFrame:
    folder = tmp_path_factory.mktemp("llama")
    build(tiny_config("llama", **LLAMA)).save_pretrained(folder / "m")
    return attngeom.score(folder / "m", progress=False, model_id="org/m")


def test_every_single_bit_flip_in_a_scores_file_is_an_error_or_changes_nothing(scores, tmp_path):
    """300 bits of the file, drawn with a fixed seed: none may change a score unnoticed."""
    path = write_scores(scores, tmp_path / "scores.parquet")
    data = path.read_bytes()
    rng = random.Random(43)
    caught = 0
    for bit in rng.sample(range(8 * len(data)), 300):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(flipped)
        try:
            read = read_scores(path)
        except DamagedRecord as err:
            assert str(err).startswith(f"{path}: ") and "\n" not in str(err), str(err)
            caught += 1
            continue
        pd.testing.assert_frame_equal(read, scores, check_exact=True)
    assert caught > 150, caught  # over half the bits are data: a flip there is caught


def test_a_scores_file_rewritten_with_other_numbers_keeps_no_valid_digest(scores, tmp_path):
    path = write_scores(scores, tmp_path / "scores.parquet")
    table = pq.read_table(path)
    symmetry = table.column_names.index("symmetry")
    edited = table.set_column(symmetry, "symmetry", pc.add(table["symmetry"], 0.01))
    pq.write_table(edited.replace_schema_metadata(table.schema.metadata), path)  # its old digest kept
    with pytest.raises(DamagedRecord, match="does not match the SHA-256 written with it"):
        read_scores(path)


@pytest.fixture
def results(scores, tmp_path):
    folder = tmp_path / "results"
    for part in ("aggregate", "tables"):
        (folder / part).mkdir(parents=True)
    write_scores(scores, folder / "aggregate/scores.parquet")
    row = {"model": "org/m", "display": "m", "family": "org", "modality": "language", "objective": "decoder"}
    row |= {"role": "pretrained", "groups": ["table_s2"], "n_params": 1, "slug": "org--m", "status": "ok"}
    write_record_csv(pd.DataFrame([row | {"reason": ""}]), folder / "aggregate/models.csv")
    write_record_csv(summarize(scores[scores["head"].isna()]).reset_index(), folder / "tables/summary.csv")
    return folder


def test_an_edited_summary_is_refused_naming_it(results):
    assert len(load_results(results).summary) == 1
    path = results / "tables/summary.csv"
    table = read_table(path)
    path.write_text(table.assign(**{"symmetry median": 0.99}).to_csv(index=False))
    with pytest.raises(
        DamagedRecord, match=f"^{path}: its content does not match the SHA-256 in summary.csv"
    ):
        load_results(results)


# ---------------------------------------------------------------- loss logs


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished tiny run (its loss log: steps 1 to 4)."""
    folder = tmp_path_factory.mktemp("run")
    config = tiny(folder, write_corpus(folder), steps=4, checkpoint_every=2, device="cpu")
    return train(config, folder / "run", progress=False), config


DAMAGE = {
    "a step twice": (lambda log: pd.concat([log.iloc[:3], log.iloc[2:]]), "step 3 comes after step 3, twice"),
    "out of order": (
        lambda log: log.iloc[[0, 2, 1, 3]],
        "step 3 comes after step 1, where a step is missing",
    ),
    "a step missing": (lambda log: log.drop(index=1), "step 3 comes after step 1, where a step is missing"),
    "going back": (lambda log: pd.concat([log, log.iloc[1:2]]), "step 2 comes after step 4, twice"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_loss_log_whose_steps_are_not_one_each_in_order_is_refused(run, tmp_path, damage):
    folder, config = run
    copy = shutil.copytree(folder, tmp_path / "run")
    edit, words = DAMAGE[damage]
    log = read_loss_log(copy / "loss.parquet")
    edit(log).to_parquet(copy / "loss.parquet", index=False)  # as a hand-joined log: no digest
    for read in (lambda: read_loss_log(copy / "loss.parquet"), lambda: table1([copy])):
        with pytest.raises(DamagedRecord, match=f"^{copy / 'loss.parquet'}: {words}"):
            read()
    with pytest.raises(InputError, match=f"^{copy / 'loss.parquet'}: {words}"):
        train(config, copy, progress=False)  # resuming it: refused, not trained on


def test_a_loss_log_edited_under_its_digest_is_refused(run, tmp_path):
    folder, _ = run
    path = shutil.copytree(folder, tmp_path / "run") / "loss.parquet"
    table = pq.read_table(path)
    loss = table.column_names.index("loss")
    edited = table.set_column(loss, "loss", [np.zeros(len(table))])
    pq.write_table(edited, path)
    with pytest.raises(DamagedRecord, match="does not match the SHA-256 written with it"):
        read_loss_log(path)


# ---------------------------------------------------------------- point 8: one schema, checked on read

DRIFT = {
    "model_id as a number": (lambda f: f.assign(model_id=7), "column 'model_id' holds int64, not string"),
    "no symmetry": (lambda f: f.drop(columns="symmetry"), "no column 'symmetry'"),
    "symmetry true/false": (lambda f: f.assign(symmetry=True), "column 'symmetry' holds bool, not double"),
    "head -1": (lambda f: f.assign(head=-1), "column 'head' holds -1, under 0"),
    "layer as text": (lambda f: f.assign(layer="0"), "column 'layer' holds large_string, not int32"),
    "a negative layer": (lambda f: f.assign(layer=-3), "column 'layer' holds -3, under 0"),
    "a NaN layer": (lambda f: f.assign(layer=float("nan")), "column 'layer' holds double, not int32"),
    "symmetry over 1": (lambda f: f.assign(symmetry=1.5), "column 'symmetry' holds 1.5, over 1"),
    "an empty stack": (lambda f: f.assign(stack=None), "column 'stack' has empty cells"),
}


@pytest.mark.parametrize("drift", list(DRIFT))
def test_a_scores_file_off_the_schema_is_one_line_naming_file_and_column(results, drift):
    """Written by hand or by another program (no digest to disagree with): the schema is checked."""
    edit, words = DRIFT[drift]
    path = results / "aggregate/scores.parquet"
    edit(read_scores(path)).to_parquet(path, index=False)
    with pytest.raises(InputError) as refused:
        load_results(results)
    text = str(refused.value)
    assert text.startswith(f"{path}: ") and words in text and "\n" not in text, text


def test_an_unknown_status_in_the_model_table_is_refused(results):
    path = results / "aggregate/models.csv"
    read_table(path).assign(status="maybe").to_csv(path, index=False)  # by hand: its digest removed
    digest_path(path).unlink()
    with pytest.raises(InputError, match=f"^{path}: status 'maybe' is not one of ok, failed, crashed"):
        load_results(results)


def test_a_heatmap_declaring_a_huge_matrix_is_refused_before_it_is_allocated(results):
    path = results / "heatmaps/encoder.npz"
    path.parent.mkdir()
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**6,) * 2}
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("matrix.npy", header.getvalue() + b"\0" * 64)
        for name, value in (("reason", ""), ("title", "m")):
            member = io.BytesIO()
            np.save(member, np.array(value))
            archive.writestr(f"{name}.npy", member.getvalue())
    with pytest.raises(InputError, match=f"^{path}: .*1000000000000 cells, not a heatmap panel"):
        load_results(results)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda f: f.drop(columns="symmetry"), "the frame has no column 'symmetry'"),
        (lambda f: f.assign(symmetry="0.5"), "column 'symmetry' holds str, not numbers"),
        (lambda f: f.assign(directionality=True), "column 'directionality' holds bool, not numbers"),
    ],
)
def test_summarize_of_a_frame_that_is_not_score_rows_is_one_line(scores, edit, words):
    with pytest.raises(InputError, match=f"^summarize: {words}"):
        summarize(edit(scores))
