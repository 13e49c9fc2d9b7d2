"""The paper's Figures 2, S1 and S2 from the summary table, and a per-head view of every model.

Each point of the main panels is a pretrained model (or a stack of an encoder-decoder model): the median
over layers with the interquartile range as error bars, against the total number of parameters. Random-
initialised controls and models trained here go to a panel of their own, one position per model, so
they neither share an x position nor stretch the main panels' scale: hollow circles for controls,
triangles for runs trained from a random initialisation, stars for a symmetric one. A heatmap shows
W_qk of one layer: by default the model's most representative layer (its score closest to the
model's median), with the colour scale clipped at a stated percentile.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from ..errors import InputError  # noqa: E402
from ..files import atomic_path  # noqa: E402
from ..training.inits import ARMS  # noqa: E402
from . import crowded_panels  # noqa: E402
from .summary import in_group, layer_rows  # noqa: E402

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
CONTROL_ROLES = ("random", "trained")
TRAINED_MARKERS = {arm.name: arm.marker for arm in ARMS}
"""Marker of a model trained here, by its initialisation (``training.inits``)."""
HEATMAP_CLIP_PERCENTILE = 99.0
"""The heatmaps' colour scale ends at this percentile of |value|, so a few large entries do not wash
out the structure."""
MIN_SPAN = 0.2
"""Smallest y range of a scatter panel."""
METRIC_LABELS = {"symmetry": "median symmetry score", "directionality": "median directionality score"}

TITLE_CHARACTERS = 48
"""A heatmap's title (a model's name and its layer) is broken into lines of at most this many characters,
so that it stays over its panel."""
NOTE_SIZE = 6

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
    if crowded_panels.crowded(failed, crowded_panels.NAMED_FAILURES):
        return crowded_panels.failed_summary(failed)
    return "; ".join(f"{r.display}: {r.reason}" for r in failed.itertuples(index=False))


LEGEND_ROOM = 0.35
"""Headroom added above the data of a scatter panel, as a fraction of its span, for the legend."""


def scatter(ax: plt.Axes, rows: pd.DataFrame, metric: str, hue: str) -> None:
    """Median ± interquartile distances vs parameters of the pretrained models; colour by ``hue``
    column, marker by modality."""
    rows = rows[(rows["status"] == "ok") & rows[f"{metric}_median"].notna() & (rows["role"] == "pretrained")]
    if crowded_panels.crowded(rows):
        crowded_panels.scatter_summary(ax, rows, metric, hue, COLOURS, LABELS, METRIC_LABELS[metric])
        return
    if rows.empty:  # no parameter axis to show: a bare log axis with cut tick labels says nothing
        ax.text(
            0.5, 0.5, "no pretrained model in this group", ha="center", va="center", transform=ax.transAxes
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    seen = set()
    for row in rows.itertuples(index=False):
        key = getattr(row, hue)
        label = ("" if row.modality == "language" else f"{row.modality}, ") + LABELS.get(key, key)
        ax.errorbar(
            row.n_params if pd.notna(row.n_params) else np.nan,
            getattr(row, f"{metric}_median"),
            yerr=[[getattr(row, f"{metric}_minus")], [getattr(row, f"{metric}_plus")]],
            fmt=MARKERS.get(row.modality, "o"),
            color=COLOURS.get(key, "grey"),
            ms=5,
            elinewidth=0.8,
            capsize=2,
            label=None if label in seen else label,
        )
        seen.add(label)
    ax.set_xscale("log")
    _labelled_decades(ax)
    ax.set_xlabel("number of parameters")
    ax.set_ylabel(METRIC_LABELS[metric])
    _zero_line_and_span(ax)
    if seen:
        _legend_above_data(ax, fontsize=7)


def _labelled_decades(ax: plt.Axes) -> None:
    """Tick labels at powers of ten only; where the models span less than two of them, the axis widens to
    the decades around them (else matplotlib labels minor ticks, which crowd into each other)."""
    low, high = np.log10(ax.get_xlim())
    if np.floor(high) - np.ceil(low) < 1:
        ax.set_xlim(10 ** np.floor(low - 0.1), 10 ** np.ceil(high + 0.1))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend_above_data(ax: plt.Axes, fontsize: float) -> None:
    """The legend in headroom added above the data, so that it covers no point or error bar."""
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + LEGEND_ROOM * (high - low))
    ax.legend(frameon=False, fontsize=fontsize, loc="upper left", ncol=2)


def _zero_line_and_span(ax: plt.Axes) -> None:
    ax.axhline(0, color="0.8", lw=0.6, zorder=0)
    low, high = ax.get_ylim()
    if high - low < MIN_SPAN:  # so that a score of about 0 reads as about 0
        middle = (low + high) / 2
        ax.set_ylim(middle - MIN_SPAN / 2, middle + MIN_SPAN / 2)


def controls(ax: plt.Axes, rows: pd.DataFrame, metric: str, hue: str, inits: dict[str, str]) -> None:
    """The random-initialised controls and the models trained here, one x position each (controls
    first, then the trained models by name): median ± interquartile distances; colour by ``hue``,
    marker by role and, for a trained model, by its initialisation (``inits``: model id → init)."""
    rows = rows[
        (rows["status"] == "ok") & rows[f"{metric}_median"].notna() & rows["role"].isin(CONTROL_ROLES)
    ]
    rows = rows.assign(order=rows["role"].map({"random": 0, "trained": 1})).sort_values(["order", "display"])
    seen = set()
    for x, row in enumerate(rows.itertuples(index=False)):
        key = getattr(row, hue)
        colour = COLOURS.get(key, "grey")
        kind = (
            "random-init control"
            if row.role == "random"
            else f"trained here, {inits.get(row.model, '?')} init"
        )
        marker = "o" if row.role == "random" else TRAINED_MARKERS.get(inits.get(row.model, ""), "D")
        label = f"{LABELS.get(key, key)}: {kind}"
        ax.errorbar(
            x,
            getattr(row, f"{metric}_median"),
            yerr=[[getattr(row, f"{metric}_minus")], [getattr(row, f"{metric}_plus")]],
            fmt=marker,
            color=colour,
            mfc="white" if row.role == "random" else colour,
            ms=8 if marker == "*" else 5,
            elinewidth=0.8,
            capsize=2,
            label=None if label in seen else label,
        )
        seen.add(label)
    labels = [
        f"{r.display} ({r.stack})" if r.objective == "encoder-decoder" else r.display
        for r in rows.itertuples()
    ]
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=6)
    ax.set_xlim(-0.7, max(len(rows), 1) - 0.3)
    ax.set_ylabel(METRIC_LABELS[metric])
    _zero_line_and_span(ax)
    if seen:
        _legend_above_data(ax, fontsize=6)


def heatmap(ax: plt.Axes, matrix: np.ndarray | None, title: str, note: str = "") -> None:
    """W_qk of one layer, colour scale symmetric around 0 and clipped at ``HEATMAP_CLIP_PERCENTILE``."""
    ax.set_title(_wrapped(title, TITLE_CHARACTERS), fontsize=8)
    if matrix is None:
        ax.text(
            0.5, 0.5, note or "not available", ha="center", va="center", wrap=True, transform=ax.transAxes
        )
        ax.set_axis_off()
        return
    limit = float(np.percentile(np.abs(matrix), HEATMAP_CLIP_PERCENTILE)) or 1.0
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    ax.set_xlabel("key dimension j")
    ax.set_ylabel("query dimension i")
    label = r"$(W_{qk})_{ij}$, clipped at the" + f"\n{HEATMAP_CLIP_PERCENTILE:g}th percentile of |value|"
    plt.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=label)


def representative_layer(scores: pd.DataFrame, metric: str) -> tuple[str, int, float, float]:
    """(stack, layer, its score, the model's median): among the layer forms of the model's first
    self-attention stack, the layer whose ``metric`` is closest to the median over its layers (the
    lower layer on a tie), so a heatmap shows a typical layer, not an outlier."""
    layers = layer_rows(scores)
    if layers.empty:
        raise InputError("no scored self-attention layer to choose a heatmap layer from")
    stack = layers["stack"].iloc[0]
    rows = layers[layers["stack"] == stack].sort_values("layer")
    median = float(rows[metric].median())
    best = (rows[metric] - median).abs().to_numpy().argmin()
    return stack, int(rows["layer"].iloc[best]), float(rows[metric].iloc[best]), median


def _wrapped(text: str, width: int) -> str:
    """``text`` with each of its lines broken at ``width`` characters."""
    return "\n".join(textwrap.fill(line, width) for line in text.splitlines())


def _caption(fig: Figure, rows: pd.DataFrame) -> None:
    """The models not scored, named under the panels (inside the figure: the layout makes room)."""
    note = _failed_note(rows)
    if note:
        width = int(fig.get_figwidth() * 72 / (NOTE_SIZE * 0.55))  # characters across the figure
        fig.supxlabel(_wrapped(f"not scored: {note}", width), x=0.01, ha="left", fontsize=NOTE_SIZE)


def figure_2(
    summary: pd.DataFrame,
    panels: list[tuple[str, np.ndarray | None, str]],
    stem: str | os.PathLike | None,
    inits: dict[str, str] | None = None,
) -> Figure:
    """Left: median symmetry (a) and directionality (b) vs parameters, pretrained encoder- vs
    decoder-only language models. Middle, when the group has any: the random controls and the models
    trained here (``controls``; ``inits``: trained model id → its initialisation). Right: the W_qk
    heatmap of one encoder layer (a) and one decoder layer (b)."""
    rows = in_group(summary, "figure_2")
    columns = ["scatter"] + (["controls"] if rows["role"].isin(CONTROL_ROLES).any() else [])
    columns += ["heatmap"] if panels else []
    fig, axes = plt.subplots(
        2, len(columns), figsize=(4.5 * len(columns), 7.5), squeeze=False, layout="constrained"
    )
    for i, metric in enumerate(("symmetry", "directionality")):
        scatter(axes[i, 0], rows, metric, "objective")
        axes[i, 0].set_title(f"{'ab'[i]}) {metric}: pretrained models", loc="left", fontweight="bold")
        if "controls" in columns:
            controls(axes[i, 1], rows, metric, "objective", inits or {})
            axes[i, 1].set_title("random controls and models trained here", loc="left", fontsize=8)
    for i, (title, matrix, note) in enumerate(panels[:2]):
        heatmap(axes[i, columns.index("heatmap")], matrix, title, note)
    _caption(fig, rows)
    return _finished(fig, stem)


def figure_groups(
    summary: pd.DataFrame,
    group: str,
    hue: str,
    title: str,
    stem: str | os.PathLike | None,
    inits: dict | None = None,
) -> Figure:
    """Figure S1 (``hue="objective"``, vision and audio) or S2 (``hue="stack"``, encoder-decoder models):
    pretrained models vs parameters; below, when the group has any, the controls and trained models."""
    rows = in_group(summary, group)
    if rows.empty:
        return _finished(empty_figure(title, group), stem)
    with_controls = bool(rows["role"].isin(CONTROL_ROLES).any())
    fig, axes = plt.subplots(
        2 if with_controls else 1,
        2,
        figsize=(9, 7.6 if with_controls else 3.8),
        squeeze=False,
        layout="constrained",
    )
    for j, (metric, letter) in enumerate(zip(("symmetry", "directionality"), "ab", strict=True)):
        scatter(axes[0, j], rows, metric, hue)
        axes[0, j].set_title(f"{letter}) {metric}: pretrained models", loc="left", fontweight="bold")
        if with_controls:
            controls(axes[1, j], rows, metric, hue, inits or {})
            axes[1, j].set_title(f"{metric}: random controls and models trained here", loc="left", fontsize=8)
    fig.suptitle(title)
    _caption(fig, rows)
    return _finished(fig, stem)


def empty_figure(title: str, group: str) -> Figure:
    """The figure of a group that holds no model (a config of language models only has none in Figures
    S1 and S2): its title and one line saying so, so that the report shows why there is nothing."""
    fig = plt.figure(figsize=(9, 1.4), layout="constrained")
    fig.suptitle(title)
    fig.text(
        0.5, 0.4, f"No models in this group: the config puts no model in {group}.", ha="center", va="center"
    )
    return fig


def _finished(fig: Figure, stem: str | os.PathLike | None) -> Figure:
    if stem is not None:  # None: the figure only (attngeom.plots)
        save(fig, stem)
    return fig


def heads_figure(scores: pd.DataFrame, title: str, stem: str | os.PathLike, reason: str = "") -> None:
    """Per stack, the distribution over heads of each layer's per-head scores (boxes), with the
    layer form's own score (line): the per-head view the paper does not show."""
    heads = scores[scores["head"].notna()] if not scores.empty else scores
    stacks = list(dict.fromkeys(heads["stack"])) if not heads.empty else []
    n_layers = max([heads.loc[heads["stack"] == s, "layer"].nunique() for s in stacks] or [1])
    width = max(4.5, 0.22 * n_layers)
    fig, axes = plt.subplots(
        2, max(len(stacks), 1), figsize=(width * max(len(stacks), 1), 6), squeeze=False, layout="constrained"
    )
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
    save(fig, stem)
