"""Re-encode committed Parquet results losslessly and smaller, so the repository stays small enough to travel.

Per-update loss logs of long runs are mostly float columns that Parquet's default (Snappy, plain floats)
barely compresses: a 150,000-update ``loss.parquet`` takes 8.4 MB. Splitting each float's bytes into
streams (``BYTE_STREAM_SPLIT``), delta-encoding the integer columns and zstd make it 2.5 MB with the same
values. Each file is rewritten only if the new one reads back equal (values, dtypes, column order) and is
smaller; written to a temporary name, then renamed.

    python benchmarks/compact_results.py benchmarks/results/horizon_4xh200      # folders or files
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

LEVEL = 19


def compact(path: Path) -> tuple[int, int]:
    """Rewrite ``path`` compactly if that is smaller and reads back equal, schema and its metadata
    included: (bytes before, bytes after)."""
    before = path.stat().st_size
    table = pq.read_table(path)
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    integers = [f.name for f in table.schema if pa.types.is_integer(f.type)]
    temporary = path.with_name(f".{path.name}.compact")
    pq.write_table(
        table,
        temporary,
        compression="zstd",
        compression_level=LEVEL,
        use_dictionary=[f.name for f in table.schema if f.name not in floats + integers],
        use_byte_stream_split=floats,
        column_encoding=dict.fromkeys(integers, "DELTA_BINARY_PACKED"),
    )
    after = temporary.stat().st_size
    if after < before and pq.read_table(temporary).equals(table, check_metadata=True):
        os.replace(temporary, path)
        return before, after
    temporary.unlink()
    return before, before


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "paths", nargs="+", type=Path, help="Parquet files, or folders searched for *.parquet"
    )
    args = parser.parse_args()
    files = sorted({p for a in args.paths for p in ([a] if a.is_file() else a.rglob("*.parquet"))})
    total_before = total_after = 0
    for path in files:
        before, after = compact(path)
        total_before, total_after = total_before + before, total_after + after
        print(f"{before / 1e6:8.2f} → {after / 1e6:8.2f} MB  {path}")
    print(f"{len(files)} files: {total_before / 1e6:.1f} → {total_after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
