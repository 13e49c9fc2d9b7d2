"""The Parquet records: one schema for every scored model, written atomically.

One row per (stack, layer, head) and one per (stack, layer) with ``head`` null: the layer form
Σ_h W_q,h W_k,g(h)ᵀ, which is what the paper's tables score. A layer that exists but is not a bilinear
form of its input (a Mamba block, linear attention) has one row with null scores and ``not_scored``
saying why. The engine builds an Arrow table, which the CLI writes as it is; the API returns a DataFrame.
Every file carries page checksums and a digest of its content, checked when it is read.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json

from .errors import InputError
from .record_files import read_parquet, write_parquet

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = pa.schema(
    [
        pa.field("model_id", pa.string(), nullable=False),  # hub id, file or folder name, in-memory name
        pa.field("revision", pa.string()),  # hub commit hash, when from the hub
        pa.field("file_hash", pa.string()),  # SHA-256 of the config and the tensor bytes read
        pa.field(
            "source_dtype", pa.string()
        ),  # what the q/k were stored as: bfloat16, int8 (bitsandbytes), Q4_K
        pa.field("model_type", pa.string(), nullable=False),  # transformers model_type
        pa.field("modality", pa.string(), nullable=False),  # language | vision | audio | multimodal
        pa.field("objective", pa.string(), nullable=False),  # bidirectional | autoregressive | enc-dec
        pa.field("stack", pa.string(), nullable=False),  # encoder | decoder | cross | ...
        pa.field("layer", pa.int32(), nullable=False),
        pa.field("head", pa.int32()),  # null: the layer row (sum over heads)
        pa.field("kv_head", pa.int32()),  # kv head g(h) = h // (H / H_kv); null on layer rows
        pa.field("n_heads", pa.int32()),  # the layer's attention shape; null on a layer not scored
        pa.field("n_kv_heads", pa.int32()),
        pa.field("head_dim", pa.int32()),
        pa.field("hidden_size", pa.int32()),  # d, rows of W_q
        pa.field("n_params", pa.int64()),  # parameters of the whole model, when known
        pa.field("symmetry", pa.float64()),  # null on cross-attention (two-space) stacks
        pa.field("directionality", pa.float64()),  # the scores: null only on a layer not scored
        pa.field("norm", pa.float64()),  # Frobenius norm of the form
        pa.field("left_out", pa.string(), nullable=False),  # comma-separated: bias, rotary, scale, ...
        pa.field("form", pa.string()),  # standard, or what a non-standard form scores; null if not scored
        pa.field("not_scored", pa.string()),  # null when scored, else why the layer has no scores
        pa.field("variant", pa.string(), nullable=False),  # directionality variant: excess | eq17
        pa.field("attngeom_version", pa.string(), nullable=False),
        pa.field("code_hash", pa.string()),  # provenance.code_hash("scoring") of the code that scored
    ]
)

COLUMNS = SCHEMA.names


def to_table(rows: list[dict]) -> pa.Table:
    """Rows (dicts keyed by column; missing keys are null) as an Arrow table with the schema.

    Built by Arrow's JSON reader: ``pa.Table.from_pylist`` imports pandas (a third of a second, a tenth
    of scoring a small model from the command line), the JSON reader does not. Floats survive exactly
    (``json`` writes the shortest repr that reads back to the same double); a key outside the schema,
    a missing non-null column or a non-finite float is an error.
    """
    if not rows:
        return pa.Table.from_batches([], schema=SCHEMA)
    lines = "\n".join(json.dumps(row, allow_nan=False) for row in rows).encode()
    options = pyarrow.json.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="error")
    return pyarrow.json.read_json(io.BytesIO(lines), parse_options=options).cast(SCHEMA)


def to_frame(table: pa.Table) -> pd.DataFrame:
    """An Arrow table of scores as a DataFrame with nullable integer and string dtypes."""
    return table.to_pandas(types_mapper=_nullable_types)


def _nullable_types(arrow_type: pa.DataType):
    import pandas as pd

    if pa.types.is_integer(arrow_type):
        return pd.Int64Dtype()
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pd.StringDtype()
    return None


def write_scores(scores: pa.Table | pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write scores to Parquet atomically (``attngeom.files.atomic_path``), with the user's umask, page
    checksums and a content digest (``attngeom.record_files``).

    A DataFrame may carry extra columns after the schema's (e.g. a training run's ``step``).
    """
    if not isinstance(scores, pa.Table):  # a DataFrame: pandas is loaded already
        extra = [c for c in scores.columns if c not in COLUMNS]
        schema = SCHEMA
        for field in pa.Schema.from_pandas(scores[extra], preserve_index=False) if extra else []:
            schema = schema.append(field)
        scores = pa.Table.from_pandas(scores[COLUMNS + extra], schema=schema, preserve_index=False)
    return write_parquet(scores, path)


def read_scores(path: str | os.PathLike) -> pd.DataFrame:
    """Scores written by ``write_scores`` (any extra columns, such as a training ``step``, are kept), their
    page checksums and content digest checked (``attngeom.record_files``), then their schema
    (``conform``)."""
    return to_frame(conform(read_parquet(path), str(path)))


REQUIRED = [field.name for field in SCHEMA if not field.nullable] + ["head", "symmetry", "directionality"]
"""The columns a scores file must have; a file of an earlier attngeom may lack others (read as null)."""
AT_LEAST = {"layer": 0, "head": 0, "kv_head": 0, "n_heads": 1, "n_kv_heads": 1, "head_dim": 1}
AT_LEAST |= {"hidden_size": 1, "n_params": 0, "norm": 0.0, "symmetry": -1.0 - 1e-6}
AT_MOST = {"symmetry": 1.0 + 1e-6}
FIX = "it is not a scores file of this attngeom; score the model again (or rerun the pipeline)"


def conform(table: pa.Table, where: str) -> pa.Table:
    """``table`` in the schema's types, checked: every column the schema names of the kind it gives
    (integers, floats or text; a narrower or wider width is cast, losslessly), required cells filled,
    numbers finite and in range (``AT_LEAST``, ``AT_MOST``); other columns kept after
    them. Anything else is one ``InputError`` naming ``where`` and the column."""
    if missing := [name for name in REQUIRED if name not in table.column_names]:
        raise InputError(f"{where}: no column {missing[0]!r} (it has {table.column_names[:12]}); {FIX}")
    columns = []
    for field in SCHEMA:
        if field.name not in table.column_names:
            columns.append(pa.nulls(len(table), field.type))
            continue
        column = table[field.name]
        if _kind(column.type) != _kind(field.type) and not pa.types.is_null(column.type):
            raise InputError(f"{where}: column {field.name!r} holds {column.type}, not {field.type}; {FIX}")
        try:
            column = column.cast(field.type)
        except pa.ArrowInvalid:
            raise InputError(
                f"{where}: column {field.name!r} has values outside {field.type}; {FIX}"
            ) from None
        _check_values(column, field, where)
        columns.append(column)
    extra = [name for name in table.column_names if name not in COLUMNS]
    return pa.table(columns + [table[name] for name in extra], schema=_with(extra, table))


def _with(extra: list[str], table: pa.Table) -> pa.Schema:
    schema = SCHEMA
    for name in extra:
        schema = schema.append(table.schema.field(name))
    return schema


def _kind(arrow_type: pa.DataType) -> str:
    if pa.types.is_integer(arrow_type):
        return "integers"
    if pa.types.is_floating(arrow_type):
        return "floats"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "text"
    return str(arrow_type)


def _check_values(column: pa.ChunkedArray, field: pa.Field, where: str) -> None:
    name = field.name
    if not field.nullable and column.null_count:
        raise InputError(f"{where}: column {name!r} has empty cells; {FIX}")
    if pa.types.is_floating(field.type) and not pc.all(pc.is_finite(column), min_count=0).as_py():
        raise InputError(f"{where}: column {name!r} holds a NaN or infinite number; {FIX}")
    low, high = (pc.min_max(column)[part].as_py() for part in ("min", "max"))
    if low is not None and name in AT_LEAST and low < AT_LEAST[name]:
        raise InputError(f"{where}: column {name!r} holds {low}, under {AT_LEAST[name]:g}; {FIX}")
    if high is not None and name in AT_MOST and high > AT_MOST[name]:
        raise InputError(f"{where}: column {name!r} holds {high}, over {AT_MOST[name]:g}; {FIX}")
