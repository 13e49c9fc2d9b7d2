"""Long documents in bounded pieces (issue 32, point 3): a run counted in documents cuts each document to what
its ``seq_len`` tokens can use before tokenising; every document reaches the tokenizer in pieces of at most
``PIECE_CHARS`` characters, in batches of about ``BATCH_CHARS``, and the tokens are those of the whole text.

RSS and time for a 20 MB document and a 150 MB gzipped JSON line: benchmarks/bench_corpus_bounds.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from training_fixtures import TINY

from attngeom.training import tokenizer as tokenizer_module
from attngeom.training.config import make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.documents import CHARS_PER_TOKEN, DocumentSource, cut
from attngeom.training.tokenizer import bert_uncased_tokenizer, piece_batches, pieces

WORD = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzéüßçñ0123456789.,;!?'-()日本語中文", min_size=1, max_size=12
)
SPACE = st.sampled_from([" ", " ", " ", "  ", "\n", "\t", " \n ", "\r\n"])
TEXT = st.lists(st.tuples(WORD, SPACE), min_size=1, max_size=120).map(
    lambda ws: "".join(w + s for w, s in ws)
)
TOKENIZER = bert_uncased_tokenizer()


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False).ids


@settings(max_examples=200, deadline=None)
@given(text=TEXT, size=st.integers(16, 80))
def test_pieces_rejoin_to_the_text_and_tokenise_as_it_does(text, size):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokenizer_module, "PIECE_CHARS", size)
        parts = list(pieces(text))
    assert "".join(parts) == text
    assert all(len(part) <= size for part in parts)
    assert [i for part in parts for i in ids(part)] == ids(text)


@settings(max_examples=100, deadline=None)
@given(docs=st.lists(TEXT, min_size=1, max_size=20), piece=st.integers(16, 60), batch=st.integers(20, 400))
def test_batches_hold_about_batch_chars_and_rebuild_every_document(docs, piece, batch):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tokenizer_module, "PIECE_CHARS", piece)
        patch.setattr(tokenizer_module, "BATCH_CHARS", batch)
        batches = list(piece_batches(docs))
    assert all(sum(len(p) for p, _ in b) < batch + piece for b in batches)
    rebuilt, current = [], ""
    for part, ends in (item for b in batches for item in b):
        current += part
        if ends:
            rebuilt, current = [*rebuilt, current], ""
    assert rebuilt == docs and current == ""


@settings(max_examples=100, deadline=None)
@given(text=TEXT, seq_len=st.integers(8, 64))
def test_a_cut_keeps_every_token_a_run_counted_in_documents_uses(text, seq_len):
    """Natural text (words of at most 12 characters): the first seq_len tokens survive the cut."""
    head = cut(text, seq_len * CHARS_PER_TOKEN)
    assert len(head) <= seq_len * CHARS_PER_TOKEN and text.startswith(head)
    assert ids(head)[:seq_len] == ids(text)[:seq_len]


def test_a_twenty_megabyte_document_is_cut_before_tokenising(tmp_path):
    corpus = tmp_path / "long.txt"
    corpus.write_text("short document\n" + "word " * (4 << 20) + "\n")
    config = make_config(TINY, {"dataset": str(corpus), "batch_documents": 2, "batch_size": 2})
    lengths = [len(doc) for doc in DocumentSource.of(config).documents()]
    assert lengths[0] == len("short document") and lengths[1] <= TINY["seq_len"] * CHARS_PER_TOKEN
    unbounded = make_config(TINY, {"dataset": str(corpus), "batch_size": 2})  # counted in tokens: all of it
    assert [len(doc) for doc in DocumentSource.of(unbounded).documents()][1] == len("word " * (4 << 20)) - 1


def test_a_long_document_tokenised_in_pieces_gives_the_whole_documents_tokens(tmp_path, monkeypatch):
    corpus = tmp_path / "docs.txt"
    long = " ".join(f"word{i % 97} piece{i % 13}." for i in range(3000))
    corpus.write_text(f"a first document\n{long}\nthe last one\n")
    monkeypatch.setattr(tokenizer_module, "PIECE_CHARS", 500)
    monkeypatch.setattr(tokenizer_module, "BATCH_CHARS", 2000)
    config = make_config(
        TINY, {"dataset": str(corpus), "tokenizer": "bert-uncased", "cache_dir": str(tmp_path / "cache")}
    )
    tokens = np.asarray(load_corpus(config, progress=False).tokens)
    sep = TOKENIZER.token_to_id("[SEP]")
    expected = [i for doc in ("a first document", long, "the last one") for i in (*ids(doc), sep)]
    assert tokens.tolist() == expected
