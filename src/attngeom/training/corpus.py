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
from ..files import atomic_dir, cache_dir, file_state
from .config import ConfigError, TrainConfig
from .documents import DocumentSource
from .tokenizer import build_tokenizer, document_ids, tokenizer_sha256

CACHE_VERSION = 2


@dataclass(frozen=True)
class Corpus:
    """A tokenised corpus: one flat token stream, documents separated by [SEP], and where its documents
    came from."""

    tokens: np.ndarray
    tokenizer: Tokenizer
    path: Path
    tokens_sha256: str
    """SHA-256 of the token stream's bytes, as written to the cache."""
    source: DocumentSource

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


def cache_key(config: TrainConfig, source: DocumentSource) -> str:
    """Hash of everything that changes the token stream: the documents' source and the tokenizer."""
    tokenizer = Path(config.tokenizer)
    parts = {
        "version": CACHE_VERSION,
        "dataset": [list(f) for f in source.files] if source.files else source.dataset,
        "text_column": config.text_column,
        "max_documents": source.max_documents,
        "character_spacing": source.character_spacing,
        "tokenizer": file_state(tokenizer) if tokenizer.is_file() else config.tokenizer,
        "vocab_size": config.vocab_size if config.tokenizer == "wordpiece" else None,
    }
    if source.max_chars is not None:  # documents cut before tokenising
        parts["cut_to_chars"] = source.max_chars
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(config: TrainConfig) -> Path:
    return Path(config.cache_dir) if config.cache_dir else cache_dir("training")


def load_corpus(config: TrainConfig, progress: bool = True, source: DocumentSource | None = None) -> Corpus:
    """The cached token stream of ``source`` (the one ``config`` names unless given), tokenising the
    corpus first if it is not cached.

    Runs that share a cache (the pipeline's runs on one corpus) take turns: the first tokenises, the
    others wait for it and read its result.
    """
    source = source or DocumentSource.of(config)
    folder = cache_root(config) / cache_key(config, source)
    with _exclusive(folder.with_name(folder.name + ".lock")):
        if not (folder / "meta.json").is_file():
            with atomic_dir(folder) as temporary:
                mark(temporary)
                _tokenise_into(temporary, config, source, progress)
    meta = json.loads((folder / "meta.json").read_text())
    return Corpus(
        tokens=np.memmap(folder / "tokens.bin", dtype=meta["dtype"], mode="r"),
        tokenizer=Tokenizer.from_file(str(folder / "tokenizer.json")),
        path=folder,
        tokens_sha256=meta["tokens_sha256"],
        source=source,
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


def _tokenise_into(folder: Path, config: TrainConfig, source: DocumentSource, progress: bool) -> None:
    """tokenizer.json, tokens.bin and meta.json (with the SHA-256 of the token stream) into ``folder``."""
    tok = build_tokenizer(config, source.texts, progress)
    sep = tok.token_to_id("[SEP]")
    dtype = np.uint16 if tok.get_vocab_size() <= np.iinfo(np.uint16).max else np.uint32
    digest = hashlib.sha256()
    n_docs = n_tokens = 0
    bar = tqdm(desc=f"tokenising {config.dataset}", unit=" docs", disable=not progress)
    with (folder / "tokens.bin").open("wb") as out:
        for ids, ends in document_ids(tok, source.texts()):
            data = np.asarray([*ids, sep] if ends else ids, dtype=dtype).tobytes()
            out.write(data)
            digest.update(data)
            n_tokens += len(ids) + ends
            n_docs += ends
            bar.update(ends)
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
