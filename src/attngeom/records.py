"""The Parquet records: one schema for every scored model, written atomically.

One row per (stack, layer, head) and one per (stack, layer) with ``head`` null: the layer form
Σ_h W_q,h W_k,g(h)ᵀ, which is what the paper's tables score.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .files import atomic_path

SCHEMA = pa.schema(
    [
        pa.field("model_id", pa.string(), nullable=False),  # hub id, path, or in-memory name
        pa.field("revision", pa.string()),  # hub commit hash, when from the hub
        pa.field("file_hash", pa.string()),  # SHA-256 of the config and the tensor bytes read
        pa.field("model_type", pa.string(), nullable=False),  # transformers model_type
        pa.field("modality", pa.string(), nullable=False),  # language | vision | audio | multimodal
        pa.field("objective", pa.string(), nullable=False),  # bidirectional | autoregressive | enc-dec
        pa.field("stack", pa.string(), nullable=False),  # encoder | decoder | cross | ...
        pa.field("layer", pa.int32(), nullable=False),
        pa.field("head", pa.int32()),  # null: the layer row (sum over heads)
        pa.field("kv_head", pa.int32()),  # kv head g(h) = h // (H / H_kv); null on layer rows
        pa.field("n_heads", pa.int32(), nullable=False),
        pa.field("n_kv_heads", pa.int32(), nullable=False),
        pa.field("head_dim", pa.int32(), nullable=False),
        pa.field("hidden_size", pa.int32(), nullable=False),  # d, rows of W_q
        pa.field("n_params", pa.int64()),  # parameters of the whole model, when known
        pa.field("symmetry", pa.float64()),  # null on cross-attention (two-space) stacks
        pa.field("directionality", pa.float64(), nullable=False),
        pa.field("norm", pa.float64(), nullable=False),  # Frobenius norm of the form
        pa.field("left_out", pa.string(), nullable=False),  # comma-separated: bias, rotary, scale, ...
        pa.field("form", pa.string(), nullable=False),  # standard, or what a non-standard form scores
        pa.field("variant", pa.string(), nullable=False),  # directionality variant: excess | eq17
        pa.field("attngeom_version", pa.string(), nullable=False),
    ]
)

COLUMNS = SCHEMA.names


def to_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows as a DataFrame with the schema's columns and nullable integer dtypes."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return table.to_pandas(types_mapper=_nullable_types)


def _nullable_types(arrow_type: pa.DataType):
    if pa.types.is_integer(arrow_type):
        return pd.Int64Dtype()
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pd.StringDtype()
    return None


def write_scores(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write scores to Parquet atomically (attngeom.files: all or nothing, the user's umask)."""
    target = Path(path)
    extra = [c for c in frame.columns if c not in COLUMNS]  # e.g. a training run's ``step``
    schema = SCHEMA
    for field in pa.Schema.from_pandas(frame[extra], preserve_index=False) if extra else []:
        schema = schema.append(field)
    table = pa.Table.from_pandas(frame[COLUMNS + extra], schema=schema, preserve_index=False)
    with atomic_path(target) as temporary:
        pq.write_table(table, temporary)
    return target


def read_scores(path: str | os.PathLike) -> pd.DataFrame:
    """Scores written by ``write_scores`` (any extra columns, such as a training ``step``, are kept)."""
    return pq.read_table(path).to_pandas(types_mapper=_nullable_types)
