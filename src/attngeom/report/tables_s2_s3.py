"""Tables S2 (symmetry) and S3 (directionality) laid out as the paper's.

The paper lists pretrained language models, encoder-only on the left and decoder-only on the right. That
block stays as it is; everything else gets a block of its own so that nothing reads as what it is not:
other pretrained kinds a config puts in the table (an encoder-decoder model per stack, a vision or audio
model), the random-initialised controls, and the models trained here. Every number is the median over
layers of the layer form's score, ± [a, b] the interquartile distances around it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pandas as pd

from ..artifacts import ARTIFACT
from ..scores import GAMMA
from ..tables import formats
from .summary import in_group

TABLES = {"symmetry": ARTIFACT["table_s2"], "directionality": ARTIFACT["table_s3"]}
"""Metric → its table (``artifacts``: the ``groups`` entry of its models, its title)."""
ROLES = {"pretrained": "pretrained", "random": "random control", "trained": "trained here"}
KINDS = {
    "bidirectional": "encoder-only",
    "autoregressive": "decoder-only",
    "encoder-decoder": "encoder-decoder",
}
SIDE_BY_SIDE = "Pretrained language models: encoder-only (left) and decoder-only (right), as in the paper"
CONTROLS = "Random-initialised controls (random matrices: the paper expects scores about 0)"
TRAINED = "Trained here (attngeom train)"
VARIANTS = {
    "excess": f"the excess of each row (column) norm over μ + {GAMMA:g}σ, as in the paper's published tables",
    "eq17": f"the row (column) norms above μ + {GAMMA:g}σ, as the paper's Eq. 17 reads",
}


def block_of(row: pd.Series) -> str:
    """Which block of the table a (model, stack) row goes in."""
    if row["role"] == "random":
        return CONTROLS
    if row["role"] == "trained":
        return TRAINED
    if row["modality"] == "language" and row["objective"] in ("bidirectional", "autoregressive"):
        return SIDE_BY_SIDE
    return f"Other pretrained models: {row['modality']}, {KINDS.get(row['objective'], row['objective'])}"


def long_table(summary: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The table's rows at full precision, one per (model, stack), with their block, role and kind: the CSV."""
    members = in_group(summary, TABLES[metric].name)
    numbers = [f"{metric}_{what}" for what in ("median", "minus", "plus")]
    long = pd.DataFrame(
        {
            "block": [block_of(row) for _, row in members.iterrows()],
            "role": members["role"].map(lambda role: ROLES.get(role, role)),
            "kind": members["objective"].map(lambda objective: KINDS.get(objective, objective)),
            **{c: members[c] for c in ["model", "display", "stack", "modality", "n_params", "n_layers"]},
            **{c: members[c] for c in numbers},
            "status": members["status"],
            "reason": members["reason"],
        }
    )
    order = {name: i for i, name in enumerate(block_order(long["block"]))}
    return long.sort_values("block", key=lambda b: b.map(order), kind="stable").reset_index(drop=True)


def block_order(names: Iterable[str]) -> list[str]:
    """The blocks in the order they are printed: pretrained language models side by side, other
    pretrained kinds, random controls, trained models."""
    present = set(names)
    others = sorted(present - {SIDE_BY_SIDE, CONTROLS, TRAINED})
    return [name for name in [SIDE_BY_SIDE, *others, CONTROLS, TRAINED] if name in present]


def _label(row: pd.Series) -> str:
    return f"{row['display']} ({row['stack']})" if row["kind"] == "encoder-decoder" else row["display"]


def _cells(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Model, parameters, median, interquartile range as text."""
    return pd.DataFrame(
        {
            "Model": [_label(row) for _, row in rows.iterrows()],
            "Parameters": rows["n_params"].map(formats.parameters).to_list(),
            "Median": [
                formats.number(m) if status == "ok" else "not scored"
                for m, status in zip(rows[f"{metric}_median"], rows["status"], strict=True)
            ],
            "Interquartile range": [
                "" if pd.isna(lo) else f"± [{lo:.2f}, {hi:.2f}]"
                for lo, hi in zip(rows[f"{metric}_minus"], rows[f"{metric}_plus"], strict=True)
            ],
        }
    )


def _notes(rows: pd.DataFrame) -> tuple[str, ...]:
    failed = rows[rows["status"] != "ok"].drop_duplicates("model")
    return tuple(f"{row.display}: not scored: {row.reason}" for row in failed.itertuples(index=False))


def _side_by_side(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Encoder-only models on the left, decoder-only on the right, row by row, as the paper prints them."""
    sides = []
    for kind in ("encoder-only", "decoder-only"):
        side = _cells(rows[rows["kind"] == kind], metric).rename(
            columns={"Model": f"{kind.capitalize()} model"}
        )
        sides.append(side.reset_index(drop=True))
    length = max(len(side) for side in sides)
    return pd.concat([side.reindex(range(length)).astype(object).fillna("") for side in sides], axis=1)


def blocks(long: pd.DataFrame, metric: str) -> list[formats.Block]:
    """The blocks of the table (``block_order``); a block's unscored models listed under it with the
    reason."""
    found = []
    for name in block_order(long["block"]):
        rows = long[long["block"] == name]
        if name == SIDE_BY_SIDE:
            grid = _side_by_side(rows, metric)
        else:
            cells = _cells(rows, metric)
            grid = cells.iloc[:, :1].assign(Kind=rows["kind"].to_list()).join(cells.iloc[:, 1:])
        found.append(formats.Block(grid, name, _notes(rows)))
    return found


def caption(metric: str, variants: Iterable[str]) -> str:
    """What the table shows and what its ± means; for directionality, the variant the scores used."""
    what = {
        "symmetry": "symmetry s = tr(M M)/‖M‖²_F ∈ [−1, 1] (1: symmetric)",
        "directionality": "directionality ∈ [−1, 1] (positive: a few rows dominate; negative: a few columns)",
    }[metric]
    text = (
        f"{what} of each layer's form M = Σ_h W_q,h W_k,hᵀ: the median over layers, and ± [a, b] the "
        "interquartile distances over layers (a = median − 25th percentile, b = 75th percentile − median). "
        "An encoder-decoder model has a row per self-attention stack; cross-attention is never included."
    )
    if metric == "directionality":
        used = "; ".join(VARIANTS.get(v, v) for v in sorted(set(variants))) or VARIANTS["excess"]
        text += f" Directionality variant: {used}."
    return text[0].upper() + text[1:]


def contrast_note(long: pd.DataFrame, metric: str) -> str:
    """Whether the pretrained encoder-only vs decoder-only contrast beats the random controls: the two
    sides' mean medians, their gap, and the span of the controls' interquartile ranges over layers (what
    random matrices give). The contrast is stated only when the gap exceeds that span's width."""
    median, minus, plus = (long[f"{metric}_{what}"] for what in ("median", "minus", "plus"))
    side = long["block"] == SIDE_BY_SIDE
    encoders = median[side & (long["kind"] == "encoder-only")].dropna()
    decoders = median[side & (long["kind"] == "decoder-only")].dropna()
    controls = long["block"] == CONTROLS
    if encoders.empty or decoders.empty:
        return ""
    text = (
        f"Encoder-only {metric} {encoders.mean():+.2f} vs decoder-only {decoders.mean():+.2f} "
        f"(mean of the medians; gap {abs(encoders.mean() - decoders.mean()):.2f})."
    )
    low, high = (median - minus)[controls].min(), (median + plus)[controls].max()
    if pd.isna(low):
        return text + " No random control to compare it with, so no contrast is claimed."
    gap, width = abs(encoders.mean() - decoders.mean()), high - low
    verdict = (
        "the contrast exceeds the controls' spread"
        if gap > width
        else "the contrast lies within the controls' spread: these models cannot show it"
    )
    return (
        f"{text} Random controls span {low:+.2f} to {high:+.2f} over layers (width {width:.2f}): {verdict}."
    )


def write(summary: pd.DataFrame, metric: str, variants: Iterable[str], stem: str | os.PathLike) -> None:
    """Table S2 or S3 as ``stem``.csv (every row, full precision), .md and .tex (the blocks)."""
    group, title = TABLES[metric].name, TABLES[metric].title
    long = long_table(summary, metric)
    empty = f"No model of this run is in {group} (the `groups` of each model in the config)."
    text = " ".join(filter(None, [caption(metric, variants), contrast_note(long, metric)]))
    formats.write_table(blocks(long, metric), stem, title, csv=long, empty=empty, caption=text)
