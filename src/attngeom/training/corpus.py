"""Corpus → tokens on disk, once: the token stream a run trains on, cached and checksummed.

Documents are tokenised once, joined with [SEP] into one token stream and cached as a flat binary file
keyed by everything that changes it (under ``files.cache_dir("training")`` unless ``cache_dir`` is set).
The same corpus and settings give the same tokenizer and the same ids on every build; the cache records
the SHA-256 of both, so a run can tell when the data under it has changed.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from ..cache_layout import mark
from ..files import atomic_dir, cache_dir
from .config import ConfigError, TrainConfig
from .documents import local_path, piece_batches, usable_chars
from .tokenizer import build_tokenizer, texts, tokenizer_sha256

CACHE_VERSION = 2


@dataclass(frozen=True)
class Corpus:
    """A tokenised corpus: one flat token stream, documents separated by [SEP]."""

    tokens: np.ndarray
    tokenizer: Tokenizer
    path: Path
    tokens_sha256: str
    """SHA-256 of the token stream's bytes, as written to the cache."""

    def token_id(self, token: str) -> int:
        index = self.tokenizer.token_to_id(token)
        if index is None:
            raise ConfigError(f"tokenizer has no {token} token")
        return index

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def tokenizer_sha256(self) -> str:
        return tokenizer_sha256(self.tokenizer)

    def document_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) in the token stream of every document with at least one token ([SEP] not
        counted)."""
        ends = np.flatnonzero(np.asarray(self.tokens) == self.token_id("[SEP]"))
        starts = np.concatenate([[0], ends[:-1] + 1])
        keep = ends > starts  # a document with no tokens has nothing to learn from
        return starts[keep], (ends - starts)[keep]


@dataclass(frozen=True)
class DataFacts:
    """How much data a run sees: its corpus' documents, the tokens of an update ([CLS] and [SEP] counted,
    padding not; each document cut to ``seq_len``) and the passes over the corpus an update makes; with
    ``updates``, the updates the run made (its loss log's last step), so that totals are the run's own,
    not those of the configured schedule."""

    documents: int
    tokens_per_update: float
    passes_per_update: float
    updates: int | None = None

    @property
    def passes(self) -> float | None:
        return None if self.updates is None else self.updates * self.passes_per_update

    def record(self) -> dict[str, float]:
        """What ``corpus.json`` keeps (the updates made are the loss log's)."""
        return {
            "documents": self.documents,
            "tokens_per_update": self.tokens_per_update,
            "passes_per_update": self.passes_per_update,
        }


def corpus_facts(corpus: Corpus, config: TrainConfig) -> DataFacts:
    """The ``DataFacts`` of ``config``'s updates over ``corpus`` (before any update is made)."""
    _, lengths = corpus.document_spans()
    if config.batch_documents:
        per_update = config.batch_documents * float(np.minimum(lengths + 2, config.seq_len).mean())
        passes = config.batch_documents / len(lengths)
    else:
        per_update = config.micro_batch_rows * config.grad_accum * config.seq_len
        passes = per_update / len(corpus.tokens)
    return DataFacts(len(lengths), per_update, passes)


def _file_state(path: Path) -> list[tuple[str, int, int]]:
    """(name, size, modification time) of a local file or of every file in a folder: an edited corpus
    gets a new cache entry instead of the stale one."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def cache_key(config: TrainConfig) -> str:
    """Hash of everything that changes the token stream."""
    dataset, tokenizer = local_path(config.dataset), Path(config.tokenizer)
    parts = {
        "version": CACHE_VERSION,
        "dataset": _file_state(dataset) if dataset else config.dataset,
        "text_column": config.text_column,
        "max_documents": config.max_documents,
        "character_spacing": config.character_spacing,
        "tokenizer": _file_state(tokenizer) if tokenizer.is_file() else config.tokenizer,
        "vocab_size": config.vocab_size if config.tokenizer == "wordpiece" else None,
    }
    if (chars := usable_chars(config)) is not None:  # documents cut before tokenising
        parts["cut_to_chars"] = chars
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(config: TrainConfig) -> Path:
    return Path(config.cache_dir) if config.cache_dir else cache_dir("training")


def load_corpus(config: TrainConfig, progress: bool = True) -> Corpus:
    """The cached token stream for this config, tokenising the corpus first if it is not cached.

    Runs that share a cache (the pipeline's runs on one corpus) take turns: the first tokenises, the
    others wait for it and read its result.
    """
    folder = cache_root(config) / cache_key(config)
    with _exclusive(folder.with_name(folder.name + ".lock")):
        if not (folder / "meta.json").is_file():
            with atomic_dir(folder) as temporary:
                mark(temporary)
                _tokenise_into(temporary, config, progress)
    meta = json.loads((folder / "meta.json").read_text())
    return Corpus(
        tokens=np.memmap(folder / "tokens.bin", dtype=meta["dtype"], mode="r"),
        tokenizer=Tokenizer.from_file(str(folder / "tokenizer.json")),
        path=folder,
        tokens_sha256=meta["tokens_sha256"],
    )


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on the file ``lock`` (other processes block until released)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tokenise_into(folder: Path, config: TrainConfig, progress: bool) -> None:
    """tokenizer.json, tokens.bin and meta.json (with the SHA-256 of the token stream) into ``folder``."""
    tok = build_tokenizer(config, progress)
    sep = tok.token_to_id("[SEP]")
    dtype = np.uint16 if tok.get_vocab_size() <= np.iinfo(np.uint16).max else np.uint32
    digest = hashlib.sha256()
    n_docs = n_tokens = 0
    bar = tqdm(desc=f"tokenising {config.dataset}", unit=" docs", disable=not progress)
    with (folder / "tokens.bin").open("wb") as out:
        for batch in piece_batches(texts(config)):  # a long document in pieces: memory follows the batch
            encodings = tok.encode_batch([piece for piece, _ in batch], add_special_tokens=False)
            for (_, ends), enc in zip(batch, encodings, strict=True):
                ids = np.asarray([*enc.ids, sep] if ends else enc.ids, dtype=dtype).tobytes()
                out.write(ids)
                digest.update(ids)
                n_tokens += len(enc.ids) + ends
            ended = sum(ends for _, ends in batch)
            n_docs += ended
            bar.update(ended)
    bar.close()
    if n_docs == 0:
        raise ConfigError(f"dataset {config.dataset!r} yielded no documents")
    tok.save(str(folder / "tokenizer.json"))
    meta = {
        "dtype": np.dtype(dtype).name,
        "documents": n_docs,
        "tokens": n_tokens,
        "tokens_sha256": digest.hexdigest(),
        "config": config.to_dict(),
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
