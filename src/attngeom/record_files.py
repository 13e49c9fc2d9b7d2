"""Record files that show their damage: a flipped bit or an edit is an error naming the file, never data.

Every Parquet file attngeom writes (scores, loss and score logs) has page checksums, which the reader
verifies, and the SHA-256 of its content (``content_digest``: each column's values and nulls) in its
metadata, which the reader recomputes: a page checksum does not cover the page headers and the footer, the
digest covers what they decode to. A CSV (the pipeline's model and summary tables) gets its SHA-256 beside
it (``<file>.sha256``). A file without a digest, written before attngeom kept one (or by hand, as the
tests' made-up run folders are), is read as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import InputError
from .files import atomic_path, write_text

DIGEST_KEY = b"attngeom.content_sha256"
AGAIN = "it was damaged or edited since it was written; write it again (rerun what made it)"


class DamagedRecord(InputError):
    """A record file whose bytes are not those written: page checksums or content digest disagree."""


NUMPY_NAMES = {"double": "float64", "float": "float32", "halffloat": "float16"}
"""pyarrow's names of its float types whose NumPy names differ (its integer names are NumPy's)."""


def _values(array: pa.Array) -> np.ndarray:
    """A primitive array as NumPy holds it, read from its buffer (a null's slot as the writer left it):
    pyarrow's own conversions (``to_numpy``, ``pa.scalar``) import pandas, which scoring does not
    otherwise import."""
    dtype = np.dtype(NUMPY_NAMES.get(str(array.type), str(array.type)))
    return np.frombuffer(
        array.buffers()[1], dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize
    )


def _bytes(flags: pa.Array) -> np.ndarray:
    """A boolean array as one byte per value (0 or 1, what NumPy's bool array holds)."""
    return _values(pc.cast(flags, pa.uint8()))


def content_digest(table: pa.Table) -> str:
    """SHA-256 of a table's metadata (pandas' note of its dtypes, say), column names and types, nulls and
    values; not of its encoding: the same rows written again, or read back, give the same digest."""
    digest = hashlib.sha256()
    metadata = sorted((k, v) for k, v in (table.schema.metadata or {}).items() if k != DIGEST_KEY)
    digest.update(repr(metadata).encode())
    for name, column in zip(table.column_names, table.columns, strict=True):
        array = column.combine_chunks()
        digest.update(json.dumps([name, str(array.type), len(array)]).encode())
        nulls = _bytes(array.is_null()).astype(bool)
        digest.update(np.packbits(nulls).tobytes())
        kind = array.type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
            values = _values(pc.cast(array, pa.uint8()) if pa.types.is_boolean(kind) else array).copy()
            values[nulls] = 0  # a null's slot holds whatever the writer left there
            digest.update(values.tobytes())
        else:
            digest.update(json.dumps(array.to_pylist(), default=str).encode())
    return digest.hexdigest()


def write_parquet(table: pa.Table, path: str | os.PathLike) -> Path:
    """``table`` written atomically to ``path`` with page checksums and its content digest."""
    metadata = {**(table.schema.metadata or {}), DIGEST_KEY: content_digest(table).encode()}
    with atomic_path(path) as temporary:
        pq.write_table(table.replace_schema_metadata(metadata), temporary, write_page_checksum=True)
    return Path(path)


def read_parquet(path: str | os.PathLike) -> pa.Table:
    """A Parquet record file, its page checksums verified and its content digest recomputed; a file that
    cannot be read or whose digest disagrees is one ``DamagedRecord`` naming it."""
    try:  # a damaged file fails pyarrow's reader in many ways (ArrowInvalid, OSError, UnicodeDecodeError)
        table = pq.read_table(path, page_checksum_verification=True)
        recorded = (table.schema.metadata or {}).get(DIGEST_KEY)
        matches = recorded is None or recorded.decode(errors="replace") == content_digest(table)
    except FileNotFoundError:
        raise
    except Exception as err:  # noqa: BLE001
        text = " ".join(str(err).split())[:160] or type(err).__name__
        raise DamagedRecord(f"{path}: not a readable Parquet file ({text}); {AGAIN}") from None
    if not matches:
        raise DamagedRecord(f"{path}: its content does not match the SHA-256 written with it; {AGAIN}")
    return table


def digest_path(path: str | os.PathLike) -> Path:
    return Path(f"{os.fspath(path)}.sha256")


def write_text_digested(path: str | os.PathLike, text: str) -> Path:
    """``text`` written atomically to ``path`` (UTF-8), then its SHA-256 beside it."""
    write_text(path, text)
    write_text(digest_path(path), hashlib.sha256(text.encode()).hexdigest() + "\n")
    return Path(path)


def check_text_digest(path: str | os.PathLike) -> None:
    """A ``DamagedRecord`` if ``path``'s bytes are not those whose SHA-256 lies beside it (none: no check)."""
    try:
        recorded = digest_path(path).read_text(encoding="utf-8", errors="replace").strip()
    except FileNotFoundError:
        return
    if hashlib.sha256(Path(path).read_bytes()).hexdigest() != recorded:
        raise DamagedRecord(
            f"{path}: its content does not match the SHA-256 in {digest_path(path).name}; {AGAIN}"
        )
