"""The feed alone: one update's batch built on the host, one thread, as ``attngeom train`` builds it on its
feed thread (``DocumentBatches.update`` on ``config/paper.yaml``'s defaults: 256 documents packed into rows,
the masked-LM corruption drawn token by token, each loss position's weight), beside the plain peer a user
would write: transformers' ``DataCollatorForLanguageModeling`` on the same 256 documents, one padded row of
512 each, as the authors' code fed them. Milliseconds an update, the median of ``--repeats`` rounds.

The feed thread holds the interpreter lock that the training step's own Python needs, so its time matters
even though it runs ahead of the GPU (``results/feed_first_fit_h100/``).

    python benchmarks/feed_time.py                       # the offline corpus (bench_training.py prepare)
    python benchmarks/feed_time.py --updates 50 --repeats 3 --out feed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from paper_setting import CACHE, corpus_settings, paper_defaults
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

from attngeom.training.config import make_config, parse_overrides
from attngeom.training.corpus import load_corpus
from attngeom.training.document_batches import DocumentBatches


def per_update_ms(build: Callable[[int], object], first: int, updates: int, repeats: int) -> float:
    """Median over ``repeats`` rounds of the mean time of ``build(step)`` over ``updates`` steps."""
    build(first)  # warm: the epoch's order, the allocator
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for step in range(first, first + updates):
            build(step)
        rounds.append((time.perf_counter() - start) / updates * 1e3)
    return statistics.median(rounds)


def collator_peer(batches: DocumentBatches, tokenizer_file: Path) -> Callable[[int], object]:
    """The same update's documents ([CLS] document [SEP], truncated as the run truncates them) through
    transformers' masked-LM collator, each padded to ``seq_len``."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file),
        pad_token="[PAD]",
        mask_token="[MASK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        unk_token="[UNK]",
    )
    collator = DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=batches.config.mlm_probability, pad_to_multiple_of=batches.config.seq_len
    )
    tokens, cls, sep = batches.corpus.tokens, batches.cls, batches.sep

    def build(step: int) -> object:
        examples = [
            {
                "input_ids": [
                    cls,
                    *tokens[batches.starts[d] : batches.starts[d] + batches.lengths[d]].tolist(),
                    sep,
                ]
            }
            for d in batches.documents(step)
        ]
        return collator(examples)

    return build


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=CACHE, help="what bench_training.py prepare wrote")
    parser.add_argument("--updates", type=int, default=200, help="updates a round")
    parser.add_argument("--repeats", type=int, default=5, help="rounds; the median is reported")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="more settings")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)

    torch.set_num_threads(1)  # the feed thread's share of the host
    config = make_config(paper_defaults(), parse_overrides([*corpus_settings(args.cache), *args.set]))
    batches = DocumentBatches(load_corpus(config, progress=False), config)
    ours = per_update_ms(batches.update, 100, args.updates, args.repeats)
    peer = per_update_ms(collator_peer(batches, Path(config.tokenizer)), 100, args.updates, args.repeats)
    result = {
        "batch_documents": config.batch_documents,
        "seq_len": config.seq_len,
        "attngeom_ms_per_update": ours,
        "collator_ms_per_update": peer,
        "cpu": f"{torch.get_num_threads()} thread, {np.__name__} {np.__version__}, torch {torch.__version__}",
    }
    print(f"feed, {config.batch_documents} documents an update, one thread ({args.repeats} rounds' median):")
    print(f"  attngeom (DocumentBatches.update, packed rows): {ours:.3f} ms an update")
    print(f"  transformers DataCollatorForLanguageModeling (padded rows): {peer:.3f} ms an update")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
