"""Figures 3 / S3 / S4 (symmetry and directionality over training, encoder vs decoder, per layer), Figure S5
(random vs symmetric init) and the comparison with the authors' published evolution, as PDF + PNG.

Medians and interquartile bands are over layers (the layer matrix, as the paper's tables) for the
whole-model curves, and over the heads of one layer for the per-layer curves (as Figure S5 states).
What each run trained comes from its folder's config.yaml (``runs.RunInfo``), never from the logs.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ..figures import save
from .runs import RunInfo, twins
from .speedup import smoothed

COLOURS = {"encoder": "tab:blue", "decoder": "tab:purple", "random": "lightskyblue", "symmetric": "navy"}
METRICS = ("symmetry", "directionality")


def load_runs(runs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scores, losses) of the run folders, each row tagged with what its run trained (``RunInfo.labels``)
    and, for the runs of a random-vs-symmetric pair (``runs.twins``), ``twin``: the pair's symmetric run."""
    infos = [RunInfo.read(run) for run in runs]
    pair = {}
    for twin in twins({info.name: info.config for info in infos}):
        pair.setdefault(twin.random, twin.symmetric)
        pair[twin.symmetric] = twin.symmetric
    scores, losses = [], []
    for run, info in zip(runs, infos, strict=True):
        labels = {**info.labels(), "twin": pair.get(info.name)}
        scores.append(pd.read_parquet(run / "scores.parquet").assign(**labels))
        losses.append(smoothed(pd.read_parquet(run / "loss.parquet")).assign(**labels))
    return pd.concat(scores, ignore_index=True), pd.concat(losses, ignore_index=True)


def _band(ax, frame: pd.DataFrame, metric: str, by: str, colour: str, label: str, style: str = "-") -> None:
    """Median line and interquartile band of ``metric`` over the rows of each step."""
    stats = frame.groupby(by)[metric].quantile([0.25, 0.5, 0.75]).unstack()
    ax.plot(stats.index, stats[0.5], style, color=colour, label=label)
    ax.fill_between(stats.index, stats[0.25], stats[0.75], color=colour, alpha=0.2, linewidth=0)


def _per_layer(ax, frame: pd.DataFrame, metric: str, title: str) -> None:
    heads = frame[frame["head"].notna()]
    layers = sorted(heads["layer"].unique())
    cmap = plt.get_cmap("viridis", max(2, len(layers)))
    for i, layer in enumerate(layers):
        _band(ax, heads[heads["layer"] == layer], metric, "step", cmap(i), f"layer {layer}")
    ax.set(title=title, xlabel="training step", ylabel=f"median {metric} (heads)")
    ax.legend(fontsize="x-small", ncol=2)


def evolution_figure(scores: pd.DataFrame, dataset: str, layers: int, stem: Path) -> None:
    """Figure 3 / S3 / S4 for one dataset and depth: random-init runs, encoder vs decoder."""
    runs = scores[
        (scores["dataset"] == dataset) & (scores["layers"] == layers) & (scores["init"] == "random")
    ]
    runs = runs[runs["reg_weight"] == 0]
    fig, axes = plt.subplots(3, 2, figsize=(10, 11), constrained_layout=True)
    layer_rows = runs[runs["head"].isna()]
    for ax, metric, panel in zip(axes[0], METRICS, "ab", strict=True):
        for objective, group in layer_rows.groupby("objective"):
            _band(ax, group, metric, "step", COLOURS[objective], f"{objective}-only")
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set(
            title=f"{panel}) median {metric}",
            xlabel="training step",
            ylabel=f"{metric} (median, IQR over layers)",
        )
        ax.legend()
    for row, metric, panel in ((1, "symmetry", "c"), (2, "directionality", "d")):
        for ax, objective in zip(axes[row], ("encoder", "decoder"), strict=True):
            group = runs[runs["objective"] == objective]
            if group.empty:
                ax.set_axis_off()
                continue
            _per_layer(ax, group, metric, f"{panel}) {objective}-only: {metric} per layer")
    fig.suptitle(f"{layers}-layer models trained on {dataset}")
    save(fig, stem)


def symmetric_init_figure(
    scores: pd.DataFrame, losses: pd.DataFrame, dataset: str, layers: int, objective: str, stem: Path
) -> None:
    """Figure S5: loss, median symmetry and per-layer symmetry, random vs symmetric initialisation, for
    the twin runs (``load_runs``' ``twin`` column) of one dataset, depth and objective; the bands pool
    the layers of every pair of the group (one pair per seed)."""

    def select(frame: pd.DataFrame) -> pd.DataFrame:
        group = (
            (frame["dataset"] == dataset) & (frame["layers"] == layers) & (frame["objective"] == objective)
        )
        return frame[group & frame["twin"].notna()]

    sc, lo = select(scores), select(losses)
    fig, axes = plt.subplots(2, 2, figsize=(10, 8), constrained_layout=True)
    for (init, run), group in lo.groupby(["init", "run"]):
        axes[0, 0].plot(group["step"], group["loss"], color=COLOURS[init], label=f"{init} init ({run})")
    axes[0, 0].set(title="a) training loss (smoothed)", xlabel="training step", ylabel="loss")
    axes[0, 0].legend()
    for init, group in sc[sc["head"].isna()].groupby("init"):
        _band(axes[0, 1], group, "symmetry", "step", COLOURS[init], f"{init} init")
    axes[0, 1].set(
        title="b) median symmetry", xlabel="training step", ylabel="symmetry (median, IQR over layers)"
    )
    axes[0, 1].legend()
    for ax, init in zip(axes[1], ("random", "symmetric"), strict=True):
        group = sc[sc["init"] == init]
        if group.empty:
            ax.set_axis_off()
            continue
        _per_layer(ax, group, "symmetry", f"c) {init} init: symmetry per layer")
    fig.suptitle(f"{layers}-layer {objective} on {dataset}: random vs symmetric initialisation")
    save(fig, stem)


def official_medians(official: pd.DataFrame) -> pd.DataFrame:
    """The authors' per-layer evolution → median over layers per (layers, objective, dataset, step)."""
    frame = official.assign(layers=official["model"].str.extract(r"\((\d+) layers\)")[0].astype(int))
    return frame.groupby(["layers", "objective", "dataset", "step"])[list(METRICS)].median().reset_index()


def ours_medians(scores: pd.DataFrame) -> pd.DataFrame:
    """Our random-init, unregularised runs → median over layers per (run, layers, objective, dataset, step)."""
    rows = scores[scores["head"].isna() & (scores["init"] == "random") & (scores["reg_weight"] == 0)]
    keys = ["run", "layers", "objective", "dataset", "step"]
    return rows.groupby(keys)[list(METRICS)].median().reset_index()


def compare_official(scores: pd.DataFrame, official: pd.DataFrame) -> pd.DataFrame:
    """Our medians next to the authors' at the same step, for runs whose depth, objective and dataset
    match one of theirs (empty when none does)."""
    keys = ["layers", "objective", "dataset", "step"]
    merged = ours_medians(scores).merge(official_medians(official), on=keys, suffixes=("", "_authors"))
    return merged[["run", *keys, "symmetry", "symmetry_authors", "directionality", "directionality_authors"]]


def official_figure(scores: pd.DataFrame, official: pd.DataFrame, stem: Path) -> None:
    """Our runs (solid) over the authors' published evolution at the same depths (dashed), per objective."""
    ours, theirs = ours_medians(scores), official_medians(official)
    theirs = theirs[theirs["layers"].isin(ours["layers"].unique())]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True, sharex=True)
    for col, objective in enumerate(("encoder", "decoder")):
        for row, metric in enumerate(METRICS):
            ax = axes[row, col]
            for (layers, dataset), group in theirs[theirs["objective"] == objective].groupby(
                ["layers", "dataset"]
            ):
                ax.plot(group["step"], group[metric], "--", alpha=0.7, label=f"authors: {layers}L {dataset}")
            for (run, dataset), group in ours[ours["objective"] == objective].groupby(["run", "dataset"]):
                ax.plot(
                    group["step"].clip(lower=1),
                    group[metric],
                    "-",
                    linewidth=2,
                    label=f"ours: {run} ({dataset})",
                )
            ax.set_xscale("log")
            ax.axhline(0, color="grey", linewidth=0.5)
            ax.set(
                title=f"{objective}-only: {metric}",
                xlabel="training step",
                ylabel=f"median {metric} over layers",
            )
            ax.legend(fontsize="x-small")
    save(fig, stem)
