"""This run's per-layer scores against the paper's published ones (``tables/reference_comparison``), with the
published numbers' known defects named where a difference is a finding, not a bug."""

from __future__ import annotations

import os
import re

import pandas as pd

from ..tables.formats import number
from .summary import METRICS, layer_rows


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
