"""Does an interrupted and resumed run reproduce the uninterrupted loss log on this machine (e.g. a GPU)?

    python benchmarks/resume_check.py [--compile]

Trains a BERT-mini-shaped run for 40 steps three times: twice straight through, once stopped at step 20 and
resumed; prints whether the loss logs are bit-identical (and the largest difference if not).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pandas as pd

from attngeom.training.config import make_config
from attngeom.training.loop import train

CACHE = Path(__file__).parent / ".cache" / "training"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--deterministic", action="store_true")
    args = parser.parse_args()
    config = make_config(
        {
            "dataset": str(CACHE / "sotu_paragraphs.txt"),
            "tokenizer": str(CACHE / "tokenizer.json"),
            "cache_dir": str(CACHE / "tokens"),
            "n_layers": 4,
            "steps": 40,
            "batch_size": 16,
            "grad_accum": 2,
            "seq_len": 256,
            "log_every": 5,
            "checkpoint_every": 10,
            "score_every": 20,
            "compile": args.compile,
            "deterministic": args.deterministic,
        }
    )
    work = CACHE / "resume_check"
    shutil.rmtree(work, ignore_errors=True)
    whole = train(config, work / "whole", progress=False)
    again = train(config, work / "again", progress=False)
    train(config, work / "cut", progress=False, stop_at=20)
    cut = train(config, work / "cut", progress=False)
    columns = ["step", "loss", "lm_loss", "grad_norm"]
    a, b, c = (pd.read_parquet(p / "loss.parquet")[columns] for p in (whole, again, cut))
    mode = "deterministic" if args.deterministic else "default"
    for name, other in (("a second uninterrupted run", b), ("the interrupted + resumed run", c)):
        delta = (a["loss"] - other["loss"]).abs().max()
        print(
            f"[{mode} kernels] {name} repeats the loss log exactly: {a.equals(other)}; max |Δloss| = {delta:.3g}"
        )


if __name__ == "__main__":
    main()
