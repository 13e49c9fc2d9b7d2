"""benchmarks/masked_vs_padded.py's padded layout: the packed batch's documents, one per padded row, give
the same loss as the packed batch, and the layout check refuses padding that leaks into the loss."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from training_fixtures import tiny, write_corpus

from attngeom.training.batch import IGNORED
from attngeom.training.corpus import load_corpus
from attngeom.training.model import LanguageModelLoss, build_model
from attngeom.training.stream_batches import PackedBatches

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "masked_vs_padded.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("masked_vs_padded", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["masked_vs_padded"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_padded_rows_give_the_packed_loss(bench, tmp_path, objective):
    config = tiny(tmp_path, write_corpus(tmp_path), objective=objective, seq_len=48, grad_accum=1)
    corpus = load_corpus(config, progress=False)
    packed = PackedBatches(corpus, config)[3]
    padded = bench.padded(packed, corpus.token_id("[PAD]"), causal=objective == "decoder")
    assert padded.input_ids.shape[0] > 2 * packed.input_ids.shape[0]  # several documents per packed row
    assert (padded.input_ids == corpus.token_id("[PAD]")).any()
    torch.manual_seed(0)
    loss = LanguageModelLoss(build_model(config, corpus.vocab_size).eval())
    with torch.no_grad():
        torch.testing.assert_close(
            loss(*padded.tensors())[1], loss(*packed.tensors())[1], rtol=1e-5, atol=1e-5
        )


def test_a_loss_target_on_padding_is_refused(bench, tmp_path):
    config = tiny(tmp_path, write_corpus(tmp_path), grad_accum=1, seq_len=48)
    corpus = load_corpus(config, progress=False)
    packed = PackedBatches(corpus, config)[0]
    padded = bench.padded(packed, corpus.token_id("[PAD]"), causal=False)
    row, slot = (padded.targets != IGNORED).nonzero()[0].tolist()
    positions = padded.positions.clone()
    positions[row, slot] = padded.input_ids.shape[1] - 1  # the last position of a row: padding
    assert padded.documents[row, -1] == 1
    with pytest.raises(AssertionError, match="padding"):
        bench.check_layout(packed, replace(padded, positions=positions), causal=False)
