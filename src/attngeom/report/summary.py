"""The per-model summary: every model's records collected by ``model_id``, and per model and stack the
median over layers of each score with its interquartile distances (median − p25, p75 − median).

Tables S2/S3 score one matrix per layer (the layer rows, ``head`` null). Cross-attention stacks map
between two spaces and are never mixed into these medians. Models are joined to their scores by
``model_id``: the id the config gives a model is the one its Parquet records.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ..errors import InputError
from ..record_files import check_text_digest, write_text_digested
from ..records import read_scores, to_frame, to_table
from ..tables.formats import LIST_SEPARATOR, csv_text

METRICS = ("symmetry", "directionality")
CROSS = "cross"  # stacks whose name contains this (cross-attention) stay out of the medians
MODEL_COLUMNS = ["model", "display", "family", "modality", "objective", "role", "groups", "n_params", "slug"]
TEXT_COLUMNS = [
    "model",
    "display",
    "family",
    "modality",
    "objective",
    "role",
    "slug",
    "status",
    "reason",
    "stack",
]
STATUSES = ("ok", "failed", "crashed")
"""What a model's scoring came to (``attngeom.pipeline.outcome``): scored, bad input, a defect."""
GROUP_SEPARATOR = LIST_SEPARATOR
"""``groups`` is a list in memory and a comma-joined cell in a CSV (readable by a person)."""


def write_record_csv(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """A table the pipeline reads back (``models.csv``, ``summary.csv``) as ``tables.formats.write_csv``
    writes it, with its SHA-256 beside it (``attngeom.record_files``), which ``read_table`` checks."""
    write_text_digested(path, csv_text(table))


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A models or summary CSV written by ``write_record_csv`` (or ``tables.formats.write_csv``), checked against the
    SHA-256 beside it if there is one: text columns as strings ('' when empty), ``groups`` as a list."""
    check_text_digest(path)
    table = pd.read_csv(
        path, dtype={c: "string" for c in [*TEXT_COLUMNS, "groups"]}, keep_default_na=False, na_values=[""]
    )
    present = [c for c in TEXT_COLUMNS if c in table.columns]
    table[present] = table[present].fillna("")
    if "groups" in table.columns:
        table["groups"] = (
            table["groups"].fillna("").map(lambda cell: [g for g in cell.split(GROUP_SEPARATOR) if g])
        )
    return table


def in_group(table: pd.DataFrame, group: str) -> pd.DataFrame:
    """The rows whose ``groups`` list holds ``group`` (a table or figure of the paper); of a table without
    rows, its columns (a mask of no rows is cast to bool: pandas takes an empty object mask for labels)."""
    return table[table["groups"].map(lambda groups: group in groups).astype(bool)]


def collect(models: list[dict], scores: Iterable[str], statuses: Iterable[str]) -> tuple:
    """The scores of ``models`` as one frame and the model table, joined on the model id.

    ``models`` are registry rows (``Model.table_row()``, in config order). ``scores`` are records files
    (one model's, or a zoo batch's: each row names its model); ``statuses`` are JSON files, each holding a
    model's status or a list of them (a zoo batch's): it names its model and says ``ok``, ``failed`` (bad
    input) or ``crashed`` (a defect), with the reason. Models of the files that ``models`` does not list
    are left out. The model table gets ``status``, ``reason`` and, where the config gave none,
    ``n_params`` from the scores (and ``modality``/``objective`` where the registry says "unknown").
    """
    status_of = {}
    for path in statuses:
        for status in statuses_in(path):
            if status.get("status") not in STATUSES:
                raise ValueError(
                    f"{path}: status {status.get('status')!r} is not one of {', '.join(STATUSES)}"
                )
            status_of[status["model"]] = status
    frames = {}
    for path in scores:
        frame = read_scores(path)
        for model_id, rows in frame.groupby("model_id", sort=False) if not frame.empty else ():
            frames[model_id] = rows
    rows, kept = [], []
    for entry in models:
        model_id = entry["model"]
        if model_id not in status_of:
            raise ValueError(f"no status file names model {model_id!r}")
        status = status_of[model_id]
        row = {key: entry.get(key) for key in MODEL_COLUMNS}
        row.update(status=status["status"], reason=status.get("reason", ""))
        if status["status"] == "ok":
            if model_id not in frames:
                raise ValueError(f"model {model_id!r} is ok but no scores file has model_id {model_id!r}")
            kept.append(frames[model_id])
            known = frames[model_id]["n_params"].dropna()
            if not row["n_params"] and len(known):
                row["n_params"] = int(known.iloc[0])
            for key in ("modality", "objective"):  # a zoo model the Hub listed without its model_type
                if row[key] == "unknown":
                    row[key] = frames[model_id][key].iloc[0]
        rows.append(row)
    table = pd.DataFrame(rows, columns=[*MODEL_COLUMNS, "status", "reason"])
    table["n_params"] = pd.to_numeric(table["n_params"]).astype("Int64")
    scores_frame = (
        pd.concat(kept, ignore_index=True) if kept else to_frame(to_table([]))
    )  # nothing scored: no rows
    return scores_frame, table


def _check_score_rows(frame: pd.DataFrame) -> None:
    if not isinstance(frame, pd.DataFrame):
        raise InputError(f"summarize takes a DataFrame of score rows, not {type(frame).__name__}")
    if missing := [c for c in ["model_id", "stack", "head", *METRICS] if c not in frame.columns]:
        raise InputError(
            f"summarize: the frame has no column {missing[0]!r} (it has {list(frame.columns)[:12]}); pass "
            "score rows as attngeom.score or attngeom.records.read_scores give them"
        )
    for column in METRICS:
        dtype = frame[column].dtype
        if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
            raise InputError(
                f"summarize: column {column!r} holds {dtype}, not numbers; pass score rows as "
                "attngeom.score or attngeom.records.read_scores give them"
            )


def statuses_in(path: str) -> list[dict]:
    """The statuses a status file holds: one model's, or a zoo batch's list of them."""
    held = json.loads(Path(path).read_text())
    return held if isinstance(held, list) else [held]


def model_records(model: str, scores: str, status: str) -> tuple[dict, pd.DataFrame]:
    """One model's status and scores (no rows unless it is ok), from its own files or its zoo batch's."""
    mine = [held for held in statuses_in(status) if held["model"] == model]
    if not mine:
        raise ValueError(f"{status} holds no status of model {model!r}")
    if mine[0]["status"] != "ok":
        return mine[0], pd.DataFrame()
    frame = read_scores(scores)
    return mine[0], frame[frame["model_id"] == model].reset_index(drop=True)


def layer_statistics(scores: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per group of ``by``: the number of scored layer rows (``head`` null, not a ``not_scored`` layer) and
    the median, 25th and 75th percentile over them of each metric. The one place these statistics are
    computed (tables, CLI)."""
    layers = scores[scores["head"].isna() & _scored(scores)]
    grouped = layers.groupby(by, sort=False)
    stats = {"n_layers": grouped.size()}
    for metric in METRICS:
        values = grouped[metric]
        stats.update(
            {
                f"{metric}_median": values.median(),
                f"{metric}_p25": values.quantile(0.25),
                f"{metric}_p75": values.quantile(0.75),
            }
        )
    return pd.DataFrame(stats).reset_index()


def layer_rows(scores: pd.DataFrame) -> pd.DataFrame:
    """The per-layer forms (head null) of self-attention stacks."""
    if scores.empty:
        return scores
    keep = scores["head"].isna() & _scored(scores) & ~scores["stack"].astype(str).str.contains(CROSS)
    return scores[keep]


def _scored(scores: pd.DataFrame) -> pd.Series:
    """Rows that carry scores: every row but a ``not_scored`` layer's (a Mamba block, a pooling probe)."""
    if "not_scored" not in scores.columns:
        return pd.Series(True, index=scores.index)
    return scores["not_scored"].isna()


def summarise(scores: pd.DataFrame, models: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, stack): median and interquartile distances of both metrics, plus status.

    A model that was not scored keeps one row with empty numbers and its reason, so tables show it.
    """
    layers = layer_rows(scores)
    statistics = [f"{m}_{what}" for m in METRICS for what in ("median", "minus", "plus")]
    per_stack = pd.DataFrame(columns=["model", "stack", "n_layers", *statistics])
    if not layers.empty:
        stats = layer_statistics(layers, ["model_id", "stack"]).rename(columns={"model_id": "model"})
        for metric in METRICS:
            median = stats[f"{metric}_median"]
            stats[f"{metric}_minus"] = median - stats.pop(f"{metric}_p25")
            stats[f"{metric}_plus"] = stats.pop(f"{metric}_p75") - median
        per_stack = stats
    summary = models.merge(per_stack, on="model", how="left", sort=False)
    summary["stack"] = summary["stack"].fillna("")
    order = {model: i for i, model in enumerate(models["model"])}
    summary = summary.sort_values("model", key=lambda s: s.map(order), kind="stable")
    return summary.reset_index(drop=True)


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Median and interquartile range over the scored layers of each model and stack (what ``attngeom
    score`` prints), indexed by ``model_id`` and ``stack``. A frame without the score rows' columns, or
    with text or true/false where numbers belong, is one ``InputError``."""
    _check_score_rows(frame)
    stats = layer_statistics(frame, ["model_id", "stack"]).set_index(["model_id", "stack"])
    columns: dict[str, pd.Series] = {"layers": stats["n_layers"]}
    for name in METRICS:
        columns[f"{name} median"] = stats[f"{name}_median"]
        columns[f"{name} IQR"] = stats[f"{name}_p75"] - stats[f"{name}_p25"]
    return pd.DataFrame(columns)
