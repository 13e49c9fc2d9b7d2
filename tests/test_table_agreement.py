"""``conformance.table_agreement.differences`` tells a table's records from discovery's: scores apart from
labels (a stack named otherwise, another left-out term), so a table whose scores discovery reproduces can go."""

from __future__ import annotations

import pytest
from conformance import BERT_SIZES, build, tiny_config

import attngeom
from attngeom.conformance.table_agreement import differences


@pytest.fixture(scope="module")
def records():
    return attngeom.score(build(tiny_config("bert", **BERT_SIZES, vocab_size=100)), progress=False)


def test_equal_records_agree(records):
    assert differences(records, records.copy()) == ([], [])


def test_a_stack_named_otherwise_and_another_term_are_labels_not_scores(records):
    found = records.assign(stack="renamed", left_out=records["left_out"].str.replace(",scale", ""))
    scores, labels = differences(records, found)
    assert scores == []
    assert any(label.startswith("stacks:") for label in labels)
    assert any(label.startswith("left_out:") for label in labels)


def test_a_changed_number_or_a_missing_record_is_a_score_difference(records):
    changed = records.copy()
    changed.loc[changed.index[0], "symmetry"] += 1e-6
    assert differences(records, changed)[0] == ["symmetry: max |Δ| 1e-06"]
    assert differences(records, records.iloc[1:])[0]
