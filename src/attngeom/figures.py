"""The paper's Figures 2, S1 and S2 from the summary table, and a per-head view of every model.

Each point is a model (or a stack of an encoder-decoder model): the median over layers with the
interquartile range as error bars, against the total number of parameters. Random-initialised
controls are drawn hollow, trained models as stars, so they read apart from pretrained ones.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from . import figures_scale  # noqa: E402
from .files import atomic_path  # noqa: E402
from .tables import in_group  # noqa: E402

COLOURS = {
    "bidirectional": "#1f77b4",  # encoder-only: blue, as in the paper
    "autoregressive": "#7b3294",  # decoder-only: purple
    "encoder": "#1f77b4",
    "decoder": "#7b3294",
}
LABELS = {
    "bidirectional": "encoder-only",
    "autoregressive": "decoder-only",
    "encoder": "encoder stack",
    "decoder": "decoder stack",
}
MARKERS = {"language": "o", "vision": "s", "audio": "^", "multimodal": "D"}
MIN_SPAN = 0.2
"""Smallest y range of a scatter panel."""
METRIC_LABELS = {"symmetry": "median symmetry score", "directionality": "median directionality score"}

DPI = 200
"""Resolution of every PNG the package writes (the PDFs are vector)."""

plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False})


def save(fig: Figure, stem: str | os.PathLike) -> list[Path]:
    """``stem``.pdf and ``stem``.png, each written atomically (attngeom.files); the figure is closed.
    The one figure-saving function of the package."""
    paths = [Path(f"{stem}.pdf"), Path(f"{stem}.png")]
    for path in paths:
        with atomic_path(path) as temporary:
            fig.savefig(temporary, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return paths


def _failed_note(rows: pd.DataFrame) -> str:
    failed = rows[rows["status"] != "ok"].drop_duplicates("model")
    if figures_scale.crowded(failed, figures_scale.NAMED_FAILURES):
        return figures_scale.failed_summary(failed)
    return "; ".join(f"{r.display}: {r.reason}" for r in failed.itertuples(index=False))


def scatter(ax: plt.Axes, rows: pd.DataFrame, metric: str, hue: str) -> None:
    """Median ± interquartile distances vs parameters; colour by ``hue`` column, marker by modality."""
    rows = rows[(rows["status"] == "ok") & rows[f"{metric}_median"].notna()]
    if figures_scale.crowded(rows):
        figures_scale.scatter_summary(ax, rows, metric, hue, COLOURS, LABELS, METRIC_LABELS[metric])
        return
    seen = set()
    for row in rows.itertuples(index=False):
        key = getattr(row, hue)
        colour = COLOURS.get(key, "grey")
        marker = "*" if row.role == "trained" else MARKERS.get(row.modality, "o")
        hollow = row.role == "random"
        label = ("" if row.modality == "language" else f"{row.modality}, ") + LABELS.get(key, key)
        label += " (random init)" if hollow else " (trained)" if row.role == "trained" else ""
        x = row.n_params if pd.notna(row.n_params) else np.nan
        ax.errorbar(
            x,
            getattr(row, f"{metric}_median"),
            yerr=[[getattr(row, f"{metric}_minus")], [getattr(row, f"{metric}_plus")]],
            fmt=marker,
            color=colour,
            mfc="white" if hollow else colour,
            ms=7 if marker == "*" else 5,
            elinewidth=0.8,
            capsize=2,
            label=None if label in seen else label,
        )
        seen.add(label)
    ax.set_xscale("log")
    ax.set_xlabel("number of parameters")
    ax.set_ylabel(METRIC_LABELS[metric])
    ax.axhline(0, color="0.8", lw=0.6, zorder=0)
    low, high = ax.get_ylim()
    if high - low < MIN_SPAN:  # so that a score of about 0 reads as about 0
        middle = (low + high) / 2
        ax.set_ylim(middle - MIN_SPAN / 2, middle + MIN_SPAN / 2)
    if rows.empty:
        ax.text(0.5, 0.5, "no scored models in this group", ha="center", va="center", transform=ax.transAxes)
    elif seen:
        ax.legend(frameon=False, fontsize=7)


def heatmap(ax: plt.Axes, matrix: np.ndarray | None, title: str, note: str = "") -> None:
    """W_qk of one layer, colour scale symmetric around 0 and clipped at the 99th |value| percentile."""
    ax.set_title(title, fontsize=8)
    if matrix is None:
        ax.text(
            0.5, 0.5, note or "not available", ha="center", va="center", wrap=True, transform=ax.transAxes
        )
        ax.set_axis_off()
        return
    limit = float(np.percentile(np.abs(matrix), 99)) or 1.0
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    ax.set_xlabel("key dimension j")
    ax.set_ylabel("query dimension i")
    plt.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=r"$(W_{qk})_{ij}$")


def _caption(fig: Figure, rows: pd.DataFrame) -> None:
    note = _failed_note(rows)
    if note:
        fig.text(0.01, -0.02, f"not scored: {note}", fontsize=6, ha="left", va="top", wrap=True)


def figure_2(
    summary: pd.DataFrame, panels: list[tuple[str, np.ndarray | None, str]], stem: str | os.PathLike
) -> None:
    """Left: median symmetry (a) and directionality (b) vs parameters, encoder- vs decoder-only
    language models. Right: the W_qk heatmap of one encoder layer (a) and one decoder layer (b)."""
    rows = in_group(summary, "figure_2")
    with_heatmaps = bool(panels)
    fig, axes = plt.subplots(
        2, 2 if with_heatmaps else 1, figsize=(9 if with_heatmaps else 5, 7), squeeze=False
    )
    for i, metric in enumerate(("symmetry", "directionality")):
        scatter(axes[i, 0], rows, metric, "objective")
        axes[i, 0].set_title(f"{'ab'[i]}) {metric}", loc="left", fontweight="bold")
    for i, (title, matrix, note) in enumerate(panels[:2]):
        heatmap(axes[i, 1], matrix, title, note)
    _caption(fig, rows)
    fig.tight_layout()
    save(fig, stem)


def figure_groups(summary: pd.DataFrame, group: str, hue: str, title: str, stem: str | os.PathLike) -> None:
    """Figure S1 (``hue="objective"``, vision and audio) or S2 (``hue="stack"``, encoder-decoder models)."""
    rows = in_group(summary, group)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    for ax, metric, letter in zip(axes, ("symmetry", "directionality"), "ab", strict=True):
        scatter(ax, rows, metric, hue)
        ax.set_title(f"{letter}) {metric}", loc="left", fontweight="bold")
    fig.suptitle(title)
    _caption(fig, rows)
    fig.tight_layout()
    save(fig, stem)


def heads_figure(scores: pd.DataFrame, title: str, stem: str | os.PathLike, reason: str = "") -> None:
    """Per stack, the distribution over heads of each layer's per-head scores (boxes), with the
    layer form's own score (line): the per-head view the paper does not show."""
    heads = scores[scores["head"].notna()] if not scores.empty else scores
    stacks = list(dict.fromkeys(heads["stack"])) if not heads.empty else []
    n_layers = max([heads.loc[heads["stack"] == s, "layer"].nunique() for s in stacks] or [1])
    width = max(4.5, 0.22 * n_layers)
    fig, axes = plt.subplots(2, max(len(stacks), 1), figsize=(width * max(len(stacks), 1), 6), squeeze=False)
    if not stacks:
        for ax in axes.flat:
            ax.text(
                0.5,
                0.5,
                f"not scored: {reason}" if reason else "no per-head rows",
                ha="center",
                va="center",
                wrap=True,
            )
            ax.set_axis_off()
    for j, stack in enumerate(stacks):
        per_head = heads[heads["stack"] == stack]
        per_layer = scores[scores["head"].isna() & (scores["stack"] == stack)].sort_values("layer")
        layers = sorted(per_head["layer"].unique())
        for i, metric in enumerate(("symmetry", "directionality")):
            ax = axes[i, j]
            data = [
                per_head.loc[per_head["layer"] == layer, metric].dropna().to_numpy(float) for layer in layers
            ]
            if not any(len(values) for values in data):
                ax.text(
                    0.5,
                    0.5,
                    f"{metric} not defined for this stack",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
            ax.boxplot(data, positions=layers, widths=0.6, showfliers=True, flierprops={"markersize": 2})
            ax.plot(
                per_layer["layer"],
                per_layer[metric],
                "o-",
                color="C3",
                ms=3,
                lw=1,
                label="layer form (Σ heads)",
            )
            ax.set_xlabel("layer")
            ax.set_ylabel(f"per-head {metric}")
            ax.set_title(f"{stack}: {metric}", fontsize=9)
            ax.axhline(0, color="0.8", lw=0.6, zorder=0)
            ticks = layers[:: max(1, len(layers) // 12)]
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.legend(frameon=False, fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    save(fig, stem)
