"""Figures 2, S1 and S2 at Hub scale: a cloud of every model and one summary marker per family.

One marker with error bars per model reads well up to a few hundred models (the paper's Figure 2 has
about 100). Beyond ``CROWDED`` models a panel draws each model as a faint dot and, over the dots, one
marker per family and colour: the median over the family's models of their median score, bars from the
25th to the 75th percentile over those models, at the family's median size, its area growing with the
number of models. The note under the figure then counts the models not scored by reason instead of
naming each. Nothing here imports matplotlib: it draws on the axes it is given (attngeom.report.score_figures).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..errors import reason_kind

CROWDED = 300
"""More models than this in a panel: draw them as a crowd."""
NAMED_FAILURES = 20
"""More models not scored than this in a figure: count them by reason instead of naming each."""
MIN_FAMILY = 3
"""A family with fewer models has no summary marker (its models are still dots)."""
NAMED_FAMILIES = 8
"""The largest families of each colour are named beside their marker."""
NOTED_REASONS = 6


def crowded(rows: pd.DataFrame, limit: int = CROWDED) -> bool:
    return rows["model"].nunique() > limit


def scatter_summary(
    ax, rows: pd.DataFrame, metric: str, hue: str, colours: dict, labels: dict, ylabel: str
) -> None:
    """``rows`` (scored, one per model and stack) as a cloud plus per-family medians; colour by ``hue``."""
    column = f"{metric}_median"
    for key, part in rows.groupby(hue, sort=True):
        colour = colours.get(key, "grey")
        label = f"{labels.get(key, key)}: {part['model'].nunique()} models"
        ax.scatter(
            part["n_params"].astype(float),
            part[column],
            s=5,
            color=colour,
            alpha=0.3,
            linewidths=0,
            rasterized=True,
            label=label,
        )
        families = part.groupby("family")
        sizes = families["model"].nunique().sort_values(ascending=False)
        for rank, (family, n) in enumerate(sizes.items()):
            members = families.get_group(family)
            x = float(members["n_params"].astype(float).median())
            if n < MIN_FAMILY or not np.isfinite(x):
                continue
            low, middle, high = members[column].quantile([0.25, 0.5, 0.75])
            ax.errorbar(
                x,
                middle,
                yerr=[[middle - low], [high - middle]],
                fmt="o",
                ms=min(4 + 0.5 * math.sqrt(n), 12),
                alpha=0.85,
                color=colour,
                mec="black",
                mew=0.5,
                elinewidth=0.8,
                capsize=2,
                zorder=3,
            )
            if rank < NAMED_FAMILIES:
                ax.annotate(str(family), (x, middle), xytext=(4, 3), textcoords="offset points", fontsize=6)
    ax.errorbar(
        [], [], yerr=[], fmt="o", color="0.5", mec="black", mew=0.5, label="family: median, IQR of its models"
    )
    ax.set_xscale("log")
    ax.set_xlabel("number of parameters")
    ax.set_ylabel(ylabel)
    ax.axhline(0, color="0.8", lw=0.6, zorder=0)
    ax.legend(frameon=False, fontsize=7, markerscale=1.5)


def failed_summary(failed: pd.DataFrame) -> str:
    """The models not scored, counted by reason (the model each reason names left out)."""
    kinds = failed["reason"].map(reason_kind).value_counts()
    shown = "; ".join(f"{kind} ×{n}" for kind, n in kinds.head(NOTED_REASONS).items())
    rest = kinds.iloc[NOTED_REASONS:].sum()
    return f"{len(failed)} models, by reason: {shown}" + (f"; {rest} for other reasons" if rest else "")
