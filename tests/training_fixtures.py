"""Tiny training settings and corpora shared by the training tests (CPU, seconds per run)."""

from __future__ import annotations

import random
from pathlib import Path

from attngeom.training.config import TrainConfig, make_config

TINY = dict(n_layers=2, hidden_size=32, n_heads=4, intermediate_size=64, seq_len=32, vocab_size=300)

WORDS = "the a nation people congress state war peace law union free trade tax year work we our must shall".split()


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))) for _ in range(n)]


def write_corpus(folder: Path, n: int = 400) -> Path:
    """A .txt corpus of ``n`` random sentences, one document per line."""
    path = folder / "corpus.txt"
    path.write_text("\n".join(sentences(n)) + "\n")
    return path


def tiny(tmp_path: Path, text_file: Path, **overrides) -> TrainConfig:
    settings = dict(
        TINY, dataset=str(text_file), cache_dir=str(tmp_path / "cache"), batch_size=4, grad_accum=2
    )
    return make_config(settings, overrides)
