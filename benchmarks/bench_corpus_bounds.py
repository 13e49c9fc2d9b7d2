"""Peak memory and time of ``attngeom train`` on corpora that once grew without bound (issue 32, point 3).

- ``long-document``: one document of ``--megabytes`` MB (words, one line of a .txt file), a 2-step run at
  seq_len 32, counted in tokens (the whole document is tokenised, in pieces) and counted in documents
  (``batch_documents=2``: the document is cut to what 32 tokens can use before tokenising);
- ``gzip-line``: one JSON line whose gzip is ``--gzip-megabytes`` MB, streamed from a Hub-like server on
  127.0.0.1 (tests/datasetserver.py): refused once ``MAX_LINE_BYTES`` have streamed past.

Each run is a child process; its peak RSS is its ``ru_maxrss`` (``os.wait4``), its time the wall clock.
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TINY = ["n_layers=2", "hidden_size=32", "n_heads=4", "intermediate_size=64", "seq_len=32", "vocab_size=300"]
SETTINGS = [*TINY, "steps=2", "batch_size=2", "grad_accum=1", "log_every=1", "score_every=2"]


def words(rng: np.random.Generator, count: int) -> bytes:
    """``count`` words drawn as in natural text: a Zipf law over a vocabulary of 50,000 random words of 2
    to 9 letters (the same vocabulary for every call), space-separated, about 2.5× compressible."""
    vocabulary = _vocabulary()
    ranks = np.minimum(rng.zipf(1.1, size=count), len(vocabulary)) - 1
    return b" ".join(vocabulary[i] for i in ranks) + b" "


def _vocabulary(size: int = 50_000) -> list[bytes]:
    rng = np.random.default_rng(12345)
    letters = rng.integers(ord("a"), ord("z") + 1, size=(size, 9), dtype=np.uint8)
    lengths = rng.integers(2, 10, size=size)
    return [row[:length].tobytes() for row, length in zip(letters, lengths, strict=True)]


def measure(command: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS in GB, exit code, last stderr line) of ``command`` in a child process."""
    with tempfile.TemporaryFile() as err:
        started = time.monotonic()
        child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - started
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    return wall, usage.ru_maxrss / 1e6, os.waitstatus_to_exitcode(status), (lines[-1] if lines else "")[:160]


def train(out: Path, *settings: str) -> list[str]:
    attngeom = str(Path(sys.executable).with_name("attngeom"))
    return [attngeom, "train", "--quiet", "--out", str(out), *SETTINGS, *settings]


def long_document(work: Path, megabytes: int) -> None:
    corpus = work / "long.txt"
    rng = np.random.default_rng(0)
    with corpus.open("wb") as out:
        out.write(b"a short first document\n")
        while out.tell() < megabytes * 1_000_000:
            out.write(words(rng, 100_000))
        out.write(b"\n" + b"a short last document\n" * 40)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = (
        ("counted in tokens", []),
        ("counted in tokens, bert-uncased", ["tokenizer=bert-uncased"]),
        ("counted in documents", ["batch_documents=2"]),
    )
    for label, extra in runs:
        settings = [f"dataset={corpus}", f"cache_dir={work / label.replace(' ', '-')}", *extra]
        wall, rss, code, last = measure(
            train(work / label.replace(" ", "-").replace(",", ""), *settings), env
        )
        print(
            f"long-document {megabytes} MB, {label}: exit {code}, {wall:.1f} s, peak RSS {rss:.2f} GB  {last}"
        )


def gzip_line(work: Path, megabytes: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from datasetserver import serving

    folder = work / "repo" / "data"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    with gzip.open(folder / "train.jsonl.gz", "wb", compresslevel=1) as out:
        out.write(b'{"text": "')
        while (folder / "train.jsonl.gz").stat().st_size < megabytes * 1_000_000:
            out.write(words(rng, 200_000))
        out.write(b'"}\n')
    size = (folder / "train.jsonl.gz").stat().st_size / 1e6
    with serving({"org/long-line": {"main": work / "repo"}}) as hub:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(work / "hf"), "OMP_NUM_THREADS": "1"}
        settings = ["dataset=hf:org/long-line", f"cache_dir={work / 'gz-cache'}"]
        wall, rss, code, last = measure(train(work / "gz-run", *settings), env)
    print(f"gzip-line {size:.0f} MB gzipped: exit {code}, {wall:.1f} s, peak RSS {rss:.2f} GB  {last}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--megabytes", type=int, default=20, help="size of the one long document")
    parser.add_argument("--gzip-megabytes", type=int, default=150, help="gzipped size of the one JSON line")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        long_document(Path(scratch), args.megabytes)
        gzip_line(Path(scratch), args.gzip_megabytes)


if __name__ == "__main__":
    main()
