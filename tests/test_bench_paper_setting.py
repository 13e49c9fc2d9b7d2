"""The training benchmark's paper rows are the CLI on ``config/paper.yaml``'s training defaults as they are:
run here for real, on the CPU, with a small model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attngeom.training.config import make_config, parse_overrides
from attngeom.training.tokenizer import bert_uncased_tokenizer

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the benchmarks import their siblings by name

import bench_training  # noqa: E402
import paper_setting  # noqa: E402

pytestmark = pytest.mark.slow
SMALL = ("device=cpu", "compile=false", "hidden_size=32", "n_heads=4", "intermediate_size=64", "seq_len=64")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """What ``bench_training.py prepare`` writes: paragraphs, one a line, and BERT's uncased tokenizer."""
    folder = tmp_path_factory.mktemp("bench-cache")
    words = "the nation congress people union states peace law trade year work our".split()
    lines = [" ".join(words[(i + k) % len(words)] for k in range(3 + i % 40)) for i in range(600)]
    (folder / "sotu_paragraphs.txt").write_text("\n".join(lines) + "\n")
    bert_uncased_tokenizer().save(str(folder / "tokenizer.json"))
    return folder


def test_the_paper_row_trains_with_the_shipped_training_defaults(cache, tmp_path):
    result = bench_training.attngeom_paper(
        2, 2, cache, tmp_path / "work", settings=(*SMALL, "batch_documents=32")
    )
    assert result["tokens_per_s"] > 0 and "rows of 64 a pass" in result["rows_a_pass"]
    overrides = parse_overrides(
        [*paper_setting.corpus_settings(cache), "n_layers=2", *SMALL, "batch_documents=32"]
    )
    expected = make_config(paper_setting.paper_defaults(), overrides)
    recorded = {k: v for k, v in result["settings"].items() if k != "differs_from_paper"}
    assert recorded == expected.to_dict()
    assert recorded["recipe"] == paper_setting.paper_defaults()["recipe"] == "authors_code"
    assert recorded["masking"] == "bernoulli" and recorded["batch_size"] is None  # one pass where it fits


def test_stacked_paper_rows_train_each_run_on_the_same_defaults(cache, tmp_path):
    result = bench_training.attngeom_paper(2, 2, cache, tmp_path / "work", 2, (*SMALL, "batch_documents=32"))
    assert result["runs"] == 2 and result["tokens_per_s"] > 0
    assert result["settings"]["recipe"] == "authors_code"
