"""Documents out of one data file, read as a binary stream in bounded pieces: a line of text, a JSON object
per line, or a Parquet row (``.gz``, ``.bz2``, ``.xz`` and ``.zst`` text and JSON files decompressed as
they stream).

Memory is bounded by the data, not by the file: one line at a time, at most ``MAX_LINE_BYTES`` (a longer
line, such as a compressed file of one endless JSON line, is a one-line error as soon as the bound is
passed, not a process that grows until it is killed); one Parquet record batch at a time. Every problem
is a ``ConfigError`` naming the file (and line) and what is wrong with it.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .config import ConfigError

MAX_LINE_BYTES = 64 << 20
"""The longest line (one document of a .txt file, one JSON object) read; longer is an error."""
PARQUET_BATCH_ROWS = 256
"""Rows of a Parquet record batch (the documents held at once while a file is read)."""
COMPRESSED = {
    ".gz": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"),
    ".bz2": lambda raw: bz2.BZ2File(raw, mode="rb"),
    ".xz": lambda raw: lzma.LZMAFile(raw, mode="rb"),
}
TEXT_SUFFIXES = (".txt", ".text")
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
_reported: set[tuple[str, int]] = set()
"""(file, count) of the skipped-documents lines already printed: the corpus is read once per tokenizer
pass, and each line is said once."""


def kind_of(name: str) -> tuple[str | None, str]:
    """(``text``, ``json`` or ``parquet``, or None; the compression suffix or "") of a data file's name."""
    base, compression = name, ""
    for suffix in (*COMPRESSED, ".zst"):
        if name.endswith(suffix):
            base, compression = name.removesuffix(suffix), suffix
    if base.endswith(TEXT_SUFFIXES):
        return "text", compression
    if base.endswith(JSON_SUFFIXES):
        return "json", compression
    if base.endswith(".parquet") and not compression:
        return "parquet", ""
    return None, compression


def read_documents(
    label: str, name: str, opened: BinaryIO, column: str, kind: str | None = None
) -> Iterator[str]:
    """The documents of one data file (``label`` in errors, ``name`` for its format unless ``kind`` says)."""
    found, compression = kind_of(name)
    kind = found or kind
    if kind == "parquet":
        yield from _parquet(label, opened, column)
        return
    if kind not in ("text", "json"):
        raise ConfigError(f"{label}: not a .txt, .jsonl/.json or .parquet data file; convert it to one")
    stream = _decompressed(label, opened, compression)
    lines = _lines(label, stream)
    yield from _text(label, lines) if kind == "text" else _json_lines(label, lines, column)


LOCAL_SUFFIXES = (".txt", ".jsonl", ".parquet")
"""The files of a local corpus (a file, or a folder of them)."""


def local_documents(path: Path, column: str) -> Iterator[str]:
    """The documents of a local corpus: one per non-empty line (.txt), per JSON object (.jsonl) or per row
    (.parquet), file after file of a folder in name order."""
    files = sorted(p for p in path.rglob("*") if p.suffix in LOCAL_SUFFIXES) if path.is_dir() else [path]
    bad = [p for p in files if p.suffix not in LOCAL_SUFFIXES]
    if not files or bad:
        raise ConfigError(f"dataset {path}: expected .txt, .jsonl or .parquet files, found {bad or 'none'}")
    for file in files:
        try:
            opened = file.open("rb")
        except OSError as err:
            raise ConfigError(f"dataset {file}: cannot be read ({err.strerror}); check the file") from None
        with opened:
            yield from read_documents(f"dataset {file}", file.name, opened, column)


def _decompression_errors() -> tuple[type[BaseException], ...]:
    try:
        import zstandard
    except ImportError:
        return (OSError, EOFError, zlib.error, lzma.LZMAError)
    return (OSError, EOFError, zlib.error, lzma.LZMAError, zstandard.ZstdError)


def _decompressed(label: str, opened: BinaryIO, compression: str) -> io.BufferedIOBase:
    if compression == ".zst":
        try:
            import zstandard
        except ImportError:
            raise ConfigError(f"{label}: a .zst file; `pip install zstandard` to read it") from None
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(opened))  # type: ignore[arg-type]
    if compression:
        return COMPRESSED[compression](opened)
    return io.BufferedReader(opened) if not isinstance(opened, io.BufferedIOBase) else opened  # type: ignore[arg-type]


def _lines(label: str, stream: io.BufferedIOBase) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line, at most ``MAX_LINE_BYTES``; damaged compressed data is an error."""
    number, errors = 0, _decompression_errors()
    while True:
        try:
            line = stream.readline(MAX_LINE_BYTES + 1)
        except errors as err:
            raise ConfigError(
                f"{label}: damaged compressed data after line {number} ({err}); check the file"
            ) from None
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            raise ConfigError(
                f"{label}:{number}: a line of more than {MAX_LINE_BYTES >> 20} MiB, longer than any document "
                "this reads; split the document or leave it out"
            )
        yield number, line


def _decode(label: str, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{label}:{number}: not UTF-8 text (byte {raw[err.start]:#04x} at column {err.start + 1}); "
            "convert the file to UTF-8"
        ) from None


def _text(label: str, lines: Iterator[tuple[int, bytes]]) -> Iterator[str]:
    """One document per non-empty line."""
    for number, raw in lines:
        text = _decode(label, number, raw).strip()
        if text:
            yield text


def _json_lines(label: str, lines: Iterator[tuple[int, bytes]], column: str) -> Iterator[str]:
    """One document per JSON object; its ``column`` must hold a string (null: no document, counted)."""
    empty = 0
    for number, raw in lines:
        line = _decode(label, number, raw)
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            raise ConfigError(f"{label}:{number}: not a JSON object on one line; check the file") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{label}:{number}: a JSON {type(row).__name__}, not an object with {column!r}")
        if column not in row:
            keys = sorted(row)[:12]
            raise ConfigError(f"{label}:{number}: no column {column!r} (its keys: {keys}); set text_column")
        text = row[column]
        if text is None or text == "":
            empty += 1
        elif isinstance(text, str):
            yield text
        else:
            raise ConfigError(
                f"{label}:{number}: {column!r} holds a {type(text).__name__}, not a string; "
                "give each document as text"
            )
    report_empty(label, empty)


def _parquet(label: str, opened: BinaryIO, column: str) -> Iterator[str]:
    """One document per row of a string ``column`` (null or empty rows: no document, counted)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(opened)
    except (pa.ArrowException, OSError) as err:
        raise ConfigError(
            f"{label}: not a readable Parquet file ({_one_line(err)}); check the file"
        ) from None
    schema = table.schema_arrow
    if column not in schema.names:
        raise ConfigError(f"{label}: no column {column!r} (it has {schema.names[:12]}); set text_column")
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise ConfigError(f"{label}: column {column!r} holds {kind}, not text; choose a text column")
    empty = 0
    try:
        for batch in table.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[column]):
            for text in batch.column(0).to_pylist():
                if text:
                    yield text
                else:
                    empty += 1
    except (pa.ArrowException, OSError) as err:
        raise ConfigError(f"{label}: damaged Parquet data ({_one_line(err)}); check the file") from None
    report_empty(label, empty)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300] or type(err).__name__


def report_empty(label: str, count: int) -> None:
    """Null or empty documents hold nothing to train on; they are skipped, but never silently (and said
    once, however often the corpus is read)."""
    if count and (label, count) not in _reported:
        _reported.add((label, count))
        print(f"attngeom: {label}: skipped {count} null or empty documents", file=sys.stderr)
