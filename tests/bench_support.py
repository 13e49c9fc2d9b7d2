"""What the benchmark tests share: ``benchmarks/`` on the import path (the benchmarks import their siblings
by name), a model small enough for the CPU, and the corpus ``bench_training.py prepare`` writes (a fixture,
through tests/conftest.py, which imports this module before any test module)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attngeom.training.tokenizer import bert_uncased_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

TINY_MODEL = ("compile=false", "hidden_size=32", "n_heads=4", "intermediate_size=64", "seq_len=64")
"""Settings on top of ``config/paper.yaml``'s training defaults."""


@pytest.fixture(scope="module")
def bench_cache(tmp_path_factory) -> Path:
    """What ``bench_training.py prepare`` writes: paragraphs, one a line, and BERT's uncased tokenizer; one
    per test module, so the token cache the benchmarks write under it is the module's own."""
    folder = tmp_path_factory.mktemp("bench-cache")
    words = "the nation congress people union states peace law trade year work our".split()
    lines = [" ".join(words[(i + k) % len(words)] for k in range(3 + i % 40)) for i in range(600)]
    (folder / "sotu_paragraphs.txt").write_text("\n".join(lines) + "\n")
    bert_uncased_tokenizer().save(str(folder / "tokenizer.json"))
    return folder
