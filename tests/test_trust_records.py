"""Damage in a record file is an error naming it, never data (issue 43, point 5): single-bit flips anywhere in
a scores file (page checksums and a content digest, verified on read), an edited summary or loss log,
and loss logs with a step twice, out of order or missing."""

from __future__ import annotations

import random
import shutil

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
from attngeom.record_files import DamagedRecord
from attngeom.records import read_scores, write_scores
from attngeom.report.results_folder import load_results
from attngeom.report.summary import read_table, summarize, write_csv
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
    write_csv(pd.DataFrame([row | {"reason": ""}]), folder / "aggregate/models.csv")
    write_csv(summarize(scores[scores["head"].isna()]).reset_index(), folder / "tables/summary.csv")
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
