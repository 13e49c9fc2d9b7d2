"""Document-masked packing: a packed row computes, for each document, what that document alone computes.

Tiny real BERT models in float32 on the CPU; the reference is transformers' own padded path (each
document alone in a row, padded, with the usual 2-D attention mask).
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from attngeom.training.batch import IGNORED
from attngeom.training.config import TrainConfig, make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.document_mask import (
    document_attention_mask,
    document_bounds,
    document_ids,
    document_positions,
)
from attngeom.training.model import LanguageModelLoss, build_model, hidden_states
from attngeom.training.stream_batches import PackedBatches

TINY = dict(n_layers=2, hidden_size=32, n_heads=4, intermediate_size=64, seq_len=48, vocab_size=300)
WORDS = "the a nation people congress state war peace law union free trade tax year work we our".split()
FLOAT32 = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture
def corpus_config(tmp_path):
    rng = random.Random(0)
    path = tmp_path / "corpus.txt"
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 20))) for _ in range(300)]
    path.write_text("\n".join(docs) + "\n")
    return make_config(TINY, {"dataset": str(path), "cache_dir": str(tmp_path / "cache"), "batch_size": 3})


def segments(documents: torch.Tensor) -> list[tuple[int, int, int]]:
    """(row, start, end) of every document of every row."""
    out = []
    for b, row in enumerate(documents.tolist()):
        start = 0
        for j in range(1, len(row) + 1):
            if j == len(row) or row[j] != row[j - 1]:
                out.append((b, start, j))
                start = j
    return out


def padded_reference(model, input_ids: torch.Tensor, documents: torch.Tensor, pad: int) -> torch.Tensor:
    """(B, L, V) logits with every document run alone in its own padded row through transformers' usual path."""
    spans = segments(documents)
    length = input_ids.shape[1]
    alone = torch.full((len(spans), length), pad, dtype=input_ids.dtype)
    attention = torch.zeros(len(spans), length, dtype=torch.long)
    for k, (b, start, end) in enumerate(spans):
        alone[k, : end - start] = input_ids[b, start:end]
        attention[k, : end - start] = 1
    logits = model.cls(model.bert(input_ids=alone, attention_mask=attention).last_hidden_state)
    out = torch.full((*input_ids.shape, logits.shape[-1]), float("nan"))
    for k, (b, start, end) in enumerate(spans):
        out[b, start:end] = logits[k, : end - start]
    return out


def packed_batch(config: TrainConfig, objective: str):
    config = make_config(config.to_dict(), {"objective": objective})
    corpus = load_corpus(config, progress=False)
    batches = PackedBatches(corpus, config)
    return batches, batches[5], corpus


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_packed_documents_give_the_logits_of_each_document_alone(corpus_config, objective):
    batches, batch, corpus = packed_batch(corpus_config, objective)
    assert len(segments(batch.documents)) > 2 * batch.documents.shape[0]  # several documents per row
    torch.manual_seed(0)
    model = build_model(make_config(corpus_config.to_dict(), {"objective": objective}), corpus.vocab_size)
    model.eval()
    with torch.no_grad():
        packed = model.cls(hidden_states(model, batch.input_ids, batch.documents))
        alone = padded_reference(model, batch.input_ids, batch.documents, corpus.token_id("[PAD]"))
        unmasked = model.cls(hidden_states(model, batch.input_ids))
    torch.testing.assert_close(packed, alone, **FLOAT32)
    assert (unmasked - alone).abs().max() > 1e-2  # without the mask, documents see each other


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_packed_loss_is_the_loss_of_each_document_alone(corpus_config, objective):
    """The training loss (gather at the loss positions, cross-entropy, targets in other documents left out)."""
    batches, batch, corpus = packed_batch(corpus_config, objective)
    torch.manual_seed(0)
    model = build_model(make_config(corpus_config.to_dict(), {"objective": objective}), corpus.vocab_size)
    model.eval()
    with torch.no_grad():
        _, loss = LanguageModelLoss(model)(*batch.tensors())
        alone = padded_reference(model, batch.input_ids, batch.documents, corpus.token_id("[PAD]"))
    picked = alone.gather(1, batch.positions.unsqueeze(-1).expand(-1, -1, alone.shape[-1]))
    kept = batch.targets != IGNORED
    expected = F.cross_entropy(picked[kept], batch.targets[kept])
    torch.testing.assert_close(loss / batch.weights.sum(), expected, **FLOAT32)  # its share of the update
    if objective == "decoder":  # a document's last token ([SEP]) would predict the next document
        sep = batch.input_ids.gather(1, batch.positions) == corpus.token_id("[SEP]")
        assert (batch.targets[sep] == IGNORED).all() and kept.sum() > 0.8 * kept.numel()
    else:
        assert kept.all()


def test_perturbing_one_document_leaves_the_others_unchanged(corpus_config):
    batches, batch, corpus = packed_batch(corpus_config, "encoder")
    torch.manual_seed(0)
    model = build_model(corpus_config, corpus.vocab_size).eval()
    b, start, end = segments(batch.documents)[1]  # the second document of row 0
    changed = batch.input_ids.clone()
    changed[b, start : end - 1] = torch.randint(5, corpus.vocab_size, (end - 1 - start,))
    with torch.no_grad():
        before = model.cls(hidden_states(model, batch.input_ids, batch.documents))
        after = model.cls(hidden_states(model, changed, batch.documents))
    inside = torch.zeros(batch.input_ids.shape, dtype=torch.bool)
    inside[b, start:end] = True
    torch.testing.assert_close(after[~inside], before[~inside], rtol=0, atol=1e-6)
    assert (after[inside] - before[inside]).abs().max() > 1e-2


def test_documents_positions_and_mask_of_a_known_row():
    sep = 3
    rows = torch.tensor([[2, 5, 6, 3, 7, 3, 3, 8, 9]])  # [CLS] a b [SEP] | c [SEP] | [SEP] | d e (cut)
    documents = document_ids(rows, sep)
    assert documents.tolist() == [[0, 0, 0, 0, 1, 1, 2, 3, 3]]
    assert document_positions(documents).tolist() == [[0, 1, 2, 3, 0, 1, 0, 0, 1]]
    mask = document_attention_mask(documents, causal=False)[0, 0]
    assert mask[4].tolist() == [False] * 4 + [True, True] + [False] * 3
    causal = document_attention_mask(documents, causal=True)[0, 0]
    assert causal[8].tolist() == [False] * 7 + [True, True]
    assert causal[7].tolist() == [False] * 7 + [True, False]


def test_document_batches_are_a_pure_function_of_seed_and_index(corpus_config):
    corpus = load_corpus(corpus_config, progress=False)
    first = PackedBatches(corpus, corpus_config)[7]
    again = PackedBatches(corpus, corpus_config)[7]
    for a, b in zip(first.tensors(), again.tensors(), strict=True):
        assert torch.equal(a, b)
    unmasked = make_config(corpus_config.to_dict(), {"document_mask": False})
    plain = PackedBatches(corpus, unmasked)[7]
    assert plain.documents is None and torch.equal(plain.input_ids, first.input_ids)
    rows = PackedBatches(corpus, corpus_config).rows(7)
    assert torch.equal(first.documents, document_ids(rows, corpus.token_id("[SEP]")))


def test_document_bounds_are_each_places_document_start_and_end():
    documents = torch.tensor([[0, 0, 0, 1, 2, 2], [5, 5, 5, 5, 5, 5]])
    lo, hi = document_bounds(documents)
    assert lo.tolist() == [[0, 0, 0, 3, 4, 4], [0] * 6]
    assert hi.tolist() == [[3, 3, 3, 4, 6, 6], [6] * 6]
