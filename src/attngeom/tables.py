"""Aggregation of per-model scores into the paper's tables and a comparison with its published numbers.

Tables S2/S3 score one matrix per layer (the layer rows, ``head`` null) and report, per model and
stack, the median over layers and the interquartile distances (median − p25, p75 − median).
Cross-attention stacks map between two spaces and are never mixed into these medians. Models are
joined to their scores by ``model_id``: the id the config gives a model is the one its Parquet records.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .files import write_text
from .records import read_scores, to_frame, to_table

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
GROUP_SEPARATOR = ","
"""``groups`` is a list in memory and a comma-joined cell in a CSV (readable by a person)."""


def write_csv(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """``table`` as a CSV, a ``groups`` list column written comma-joined."""
    if "groups" in table.columns:
        table = table.assign(groups=table["groups"].map(GROUP_SEPARATOR.join))
    write_text(path, table.to_csv(index=False))


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A models or summary CSV written by ``write_csv``: text columns as strings ('' when empty),
    ``groups`` as a list."""
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
    """The rows whose ``groups`` list holds ``group`` (a table or figure of the paper)."""
    return table[table["groups"].map(lambda groups: group in groups)]


def collect(models: list[dict], scores: Iterable[str], statuses: Iterable[str]) -> tuple:
    """All per-model Parquet files as one frame and the model table, joined on the model id.

    ``models`` are registry rows (``Model.table_row()``, in config order); each status JSON names its
    model and says ``ok``, ``failed`` (bad input) or ``crashed`` (a defect), with the reason. The model
    table gets ``status``, ``reason`` and, where the config gave none, ``n_params`` from the scores (and
    ``modality``/``objective`` where the registry says "unknown").
    """
    status_of = {}
    for path in statuses:
        status = json.loads(Path(path).read_text())
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


def number(value: float, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals; '' when missing."""
    return "" if pd.isna(value) else f"{value:.{digits}f}"


def parameters(value: float) -> str:
    """A parameter count as people write it: 22.7M, 1.24B; '' when unknown."""
    if pd.isna(value):
        return ""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.0f}"


@dataclass(frozen=True)
class Block:
    """One grid of a table file, under its own heading (empty: none), with notes printed below it."""

    table: pd.DataFrame
    heading: str = ""
    notes: tuple[str, ...] = ()


def _markdown_grid(table: pd.DataFrame) -> list[str]:
    cells = table.astype(str).apply(lambda col: col.str.replace("|", "\\|", regex=False))
    header = [str(c).replace("|", "\\|") for c in table.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in table.columns) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in cells.itertuples(index=False)]


def to_markdown(table: pd.DataFrame | list[Block], title: str, caption: str = "") -> str:
    """A GitHub Markdown heading, the caption, then the table (or each block under its own heading)."""
    blocks = table if isinstance(table, list) else [Block(table)]
    lines = [f"# {title}", ""] + ([caption, ""] if caption else [])
    for block in blocks:
        lines += [f"## {block.heading}", ""] if block.heading else []
        lines += [*_markdown_grid(block.table), ""]
        lines += [*(f"- {note}" for note in block.notes), ""] if block.notes else []
    return "\n".join(lines).rstrip("\n") + "\n"


_LATEX_SPECIALS = {c: "\\" + c for c in "&%$#_{}"} | {
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
    "\\": r"\textbackslash{}",
}


def _latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIALS.get(c, c) for c in text).replace("±", r"$\pm$")


def _latex_grid(table: pd.DataFrame) -> list[str]:
    header = " & ".join(_latex_escape(str(c)) for c in table.columns) + r" \\"
    body = [" & ".join(_latex_escape(str(v)) for v in row) + r" \\" for row in table.itertuples(index=False)]
    return [
        r"\begin{tabular}{" + "l" * len(table.columns) + "}",
        r"\toprule",
        header,
        r"\midrule",
        *body,
        r"\bottomrule",
        r"\end{tabular}",
    ]


def to_latex(table: pd.DataFrame | list[Block], title: str, caption: str = "") -> str:
    """A booktabs ``table`` environment captioned with the title and caption; blocks one tabular each,
    under a bold heading, their notes below."""
    blocks = table if isinstance(table, list) else [Block(table)]
    lines = [
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{_latex_escape(f'{title}. {caption}' if caption else title)}}}",
    ]
    for i, block in enumerate(blocks):
        lines += [r"\medskip"] if i else []
        lines += [rf"\textbf{{{_latex_escape(block.heading)}}}\\[2pt]"] if block.heading else []
        lines += _latex_grid(block.table)
        lines += [rf"\\[2pt]{{\footnotesize {_latex_escape(note)}}}" for note in block.notes]
    return "\n".join([*lines, r"\end{table}", ""])


def write_table(
    table: pd.DataFrame | list[Block],
    stem: str | os.PathLike,
    title: str,
    csv: pd.DataFrame | None = None,
    empty: str = "This table has no rows.",
    caption: str = "",
) -> None:
    """``stem``.csv (``csv`` if given: full precision), ``stem``.md and ``stem``.tex: the title, the
    caption (what the table shows, what its ± means), then the table, or each of its blocks under its
    heading. A table without rows is still a CSV with its header, and the MD/TeX say ``empty`` (one
    sentence: why) instead of a grid."""
    stem = str(stem)
    if csv is None and isinstance(table, list):
        raise ValueError("a table in blocks needs its full-precision csv")
    write_csv(table if csv is None else csv, stem + ".csv")
    blocks = [b for b in (table if isinstance(table, list) else [Block(table)]) if not b.table.empty]
    if not blocks:
        write_text(stem + ".md", f"# {title}\n\n{empty}\n" + (f"\n{caption}\n" if caption else ""))
        write_text(stem + ".tex", f"% {_latex_escape(title)}\n{_latex_escape(' '.join([empty, caption]))}\n")
        return
    write_text(stem + ".md", to_markdown(blocks, title, caption))
    write_text(stem + ".tex", to_latex(blocks, title, caption))


def known_defects(path: str | os.PathLike) -> list[tuple[re.Pattern, str]]:
    """(model id pattern, defect) pairs: where the published reference numbers are known to be wrong."""
    table = pd.read_csv(path)
    return [(re.compile(p), d) for p, d in zip(table["pattern"], table["defect"], strict=True)]


def _defect_of(model: str, defects: list[tuple[re.Pattern, str]]) -> str:
    return "; ".join(defect for pattern, defect in defects if pattern.search(model))


def _reference_stack(ours: pd.DataFrame, ref_stack: str, n_layers: int) -> str | None:
    """Our stack matching a reference (model, stack); the reference leaves it empty for one-stack models."""
    stacks = list(dict.fromkeys(ours["stack"]))
    if ref_stack:
        return ref_stack if ref_stack in stacks else None
    if len(stacks) == 1:
        return stacks[0]
    same_depth = [s for s in stacks if (ours["stack"] == s).sum() == n_layers]
    return same_depth[0] if same_depth else None


COMPARISON_COLUMNS = [
    "model",
    "display",
    "stack",
    "status",
    "reason",
    "n_layers_ours",
    "n_layers_paper",
    *[f"{m}_{what}" for m in METRICS for what in ("median_ours", "median_paper", "max_abs_diff")],
    "reference_defect",
]
NOTHING_TO_COMPARE = (
    "None of this run's models is among those whose per-layer scores the paper published "
    "(config/reference/official_per_layer_scores.csv), so there is nothing to compare."
)


def compare_with_reference(
    scores: pd.DataFrame, models: pd.DataFrame, reference: pd.DataFrame, defects: list
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per layer and per (model, stack): this run vs the paper's published per-layer scores.

    Only models present in both the run's registry and the reference appear. ``reference_defect``
    names a known defect of the published numbers: there a difference is a finding, not a bug.
    """
    reference = reference.assign(stack=reference["stack"].astype("string").fillna(""))
    layers = layer_rows(scores)
    per_layer, per_model = [], []
    for model in models.itertuples(index=False):
        ref_model = reference[reference["model_id"] == model.model]
        ours_model = layers[layers["model_id"] == model.model] if not layers.empty else layers
        for ref_stack, ref in ref_model.groupby("stack", sort=False):
            stack = _reference_stack(ours_model, ref_stack, len(ref)) if model.status == "ok" else None
            ours = ours_model[ours_model["stack"] == stack] if stack else ours_model.iloc[0:0]
            merged = ref[["layer", *METRICS]].merge(
                ours[["layer", *METRICS]], on="layer", how="outer", suffixes=("_paper", "_ours")
            )
            merged.insert(0, "stack", stack or ref_stack)
            merged.insert(0, "model", model.model)
            per_layer.append(merged)
            row = {
                "model": model.model,
                "display": model.display,
                "stack": stack or ref_stack,
                "status": model.status,
                "reason": model.reason,
                "n_layers_ours": len(ours),
                "n_layers_paper": len(ref),
            }
            for metric in METRICS:
                row[f"{metric}_median_ours"] = ours[metric].median()
                row[f"{metric}_median_paper"] = ref[metric].median()
                row[f"{metric}_max_abs_diff"] = (
                    (merged[f"{metric}_ours"] - merged[f"{metric}_paper"]).abs().max()
                )
            row["reference_defect"] = _defect_of(model.model, defects)
            per_model.append(row)
    layer_columns = ["model", "stack", "layer"] + [f"{m}_{s}" for m in METRICS for s in ("paper", "ours")]
    return (
        pd.concat(per_layer, ignore_index=True) if per_layer else pd.DataFrame(columns=layer_columns),
        pd.DataFrame(per_model, columns=COMPARISON_COLUMNS),
    )


def comparison_display(per_model: pd.DataFrame) -> pd.DataFrame:
    """The per-model comparison as display strings."""
    notes = []
    for row in per_model.itertuples(index=False):
        parts = [] if row.status == "ok" else [f"not scored: {row.reason}"]
        if row.reference_defect:
            parts.append(f"reference defect: {row.reference_defect}")
        notes.append("; ".join(parts))
    return pd.DataFrame(
        {
            "Model": per_model["display"],
            "Stack": per_model["stack"],
            "Layers (ours/paper)": [
                f"{a}/{b}"
                for a, b in zip(per_model["n_layers_ours"], per_model["n_layers_paper"], strict=True)
            ],
            "Symmetry ours": per_model["symmetry_median_ours"].map(number),
            "Symmetry paper": per_model["symmetry_median_paper"].map(number),
            "Max |Δ| sym.": per_model["symmetry_max_abs_diff"].map(lambda v: number(v, 3)),
            "Dir. ours": per_model["directionality_median_ours"].map(number),
            "Dir. paper": per_model["directionality_median_paper"].map(number),
            "Max |Δ| dir.": per_model["directionality_max_abs_diff"].map(lambda v: number(v, 3)),
            "Note": notes,
        }
    )


def summarize(frame: pd.DataFrame) -> pd.DataFrame:
    """Median and interquartile range over the scored layers of each model and stack (what ``attngeom
    score`` prints), indexed by ``model_id`` and ``stack``."""
    stats = layer_statistics(frame, ["model_id", "stack"]).set_index(["model_id", "stack"])
    columns: dict[str, pd.Series] = {"layers": stats["n_layers"]}
    for name in METRICS:
        columns[f"{name} median"] = stats[f"{name}_median"]
        columns[f"{name} IQR"] = stats[f"{name}_p75"] - stats[f"{name}_p25"]
    return pd.DataFrame(columns)
