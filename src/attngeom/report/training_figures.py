"""Figures 3 / S3 / S4 (symmetry and directionality over training, encoder vs decoder, per layer), Figure S5
(every init arm against random, the authors' loss curves beside ours) and the comparison with the authors' published evolution, as PDF + PNG.

Two quantities, named in every panel title because they differ (0.014 vs 0.24 for the same layer and
step is possible): the **layer form** M = Σ_h M_h (what the paper's tables score), summarised by its
median over layers, and the **heads** M_h of one layer, summarised by their median over heads (what the
paper's per-layer panels and Figure S5 show). The per-layer panels draw the layer form over the head
median. Bands are interquartile ranges pooled over every seed; with more than one seed each seed's median
is also drawn as a thin line. Each init arm has its colour, line style and marker (declared with the arm,
``training.inits``), in our panels and the authors' alike.
What each run trained comes from its folder's config.yaml (``runs.RunInfo``), never from the logs. Runs
whose evolution other scoring code computed are named in a footnote (``scoring_code``).
Each figure function saves its figure and returns it (closed), so what it drew can be inspected.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..runstats import authors
from ..runstats.official import METRICS, nearest_official, official_medians, official_note, ours_medians
from ..runstats.pairing import twins
from ..runstats.significance import least_exact_p
from ..runstats.smoothing import smoothed
from ..runstats.speedup import CLAIM_RULE
from ..training.bookkeeping import read_loss_log, read_score_log
from ..training.inits import ARM, ARMS, AUTHORS, INITS, REFERENCE
from ..training.runs import RunInfo
from .score_figures import save
from .scoring_code import other_code_note

COLOURS = {"encoder": "tab:blue", "decoder": "tab:purple", **{arm.name: arm.colour for arm in ARMS}}
STYLES = {arm.name: arm.line for arm in ARMS}
LINE_MARKS = {
    arm.name: (
        {"marker": arm.marker, "markersize": 3, "markevery": 0.08, "zorder": 3}
        if arm.name == REFERENCE
        else {"alpha": 0.75, "zorder": 2}
    )
    for arm in ARMS
}
"""Figure S5's loss lines: the other arms first and translucent, the reference arm's on top with its
markers, so that where the curves coincide all stay visible."""
LAYER_FORM = "layer form Σ_h M_h"
LAYER_FORM_STYLE = ":"


def load_runs(runs: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scores, losses) of the run folders, each row tagged with what its run trained (``RunInfo.labels``)
    and, for the runs of a compared pair (``runstats.pairing.twins``), ``twin``: the pair's candidate run.
    Losses are smoothed as Table 1 smooths them."""
    infos = [RunInfo.read(run) for run in runs]
    pair = {}
    for twin in twins({info.name: info.config for info in infos}):
        pair.setdefault(twin.reference, twin.candidate)
        pair[twin.candidate] = twin.candidate
    scores, losses = [], []
    for run, info in zip(runs, infos, strict=True):
        labels = {**info.labels(), "twin": pair.get(info.name)}
        scores.append(read_score_log(run / "scores.parquet").assign(**labels))
        losses.append(smoothed(read_loss_log(run / "loss.parquet")).assign(**labels))
    return pd.concat(scores, ignore_index=True), pd.concat(losses, ignore_index=True)


def _note_other_code(fig: Figure, scores: pd.DataFrame) -> None:
    """A footnote naming the runs drawn whose evolution other scoring code computed (``scoring_code``)."""
    if note := other_code_note(scores):
        width = int(fig.get_figwidth() * 14)  # the characters a line of small type holds
        fig.supxlabel(textwrap.fill(note, width), fontsize="small", color="darkred")


def _seeds(frame: pd.DataFrame) -> int:
    return frame["seed"].nunique() if len(frame) else 0


def _band(
    ax, frame: pd.DataFrame, metric: str, colour, label: str, style: str = "-", thin: bool = True
) -> None:
    """Median line and interquartile band of ``metric`` over the rows of each step (pooled over seeds),
    and with several seeds and ``thin``, each seed's median as a thin line."""
    stats = frame.groupby("step")[metric].quantile([0.25, 0.5, 0.75]).unstack()
    ax.plot(stats.index, stats[0.5], style, color=colour, label=label)
    ax.fill_between(stats.index, stats[0.25], stats[0.75], color=colour, alpha=0.2, linewidth=0)
    if thin and _seeds(frame) > 1:
        for _, seed in frame.groupby("seed"):
            median = seed.groupby("step")[metric].median()
            ax.plot(median.index, median.values, style, color=colour, linewidth=0.6, alpha=0.6)


def _layer_median(ax, frame: pd.DataFrame, metric: str, label: str, colour: str, style: str = "-") -> None:
    """The layer form's median and IQR over layers, per step."""
    _band(ax, frame[frame["head"].isna()], metric, colour, label, style)


def _layer_title(panel: str, metric: str, seeds: int) -> str:
    thin = "; thin: each seed" if seeds > 1 else ""
    return f"{panel}) {metric} of the {LAYER_FORM}, median over layers\n(line; band: IQR over layers{thin})"


def _per_layer(ax, frame: pd.DataFrame, metric: str, title: str) -> None:
    """Per layer: the median and IQR of ``metric`` over the layer's heads, and the layer form's own
    score (median over seeds) drawn over it."""
    heads, forms = frame[frame["head"].notna()], frame[frame["head"].isna()]
    layers = sorted(heads["layer"].unique())
    cmap = plt.get_cmap("viridis", max(2, len(layers)))
    for i, layer in enumerate(layers):
        _band(ax, heads[heads["layer"] == layer], metric, cmap(i), f"layer {layer}", thin=False)
        form = forms[forms["layer"] == layer].groupby("step")[metric].median()
        ax.plot(form.index, form.values, LAYER_FORM_STYLE, color=cmap(i), linewidth=1.5)
    seeds = _seeds(frame)
    ax.set(
        title=f"{title}, median over heads\n(line; band: IQR over heads{' and seeds' if seeds > 1 else ''}; "
        f"dotted: {LAYER_FORM})",
        xlabel="training step",
        ylabel=metric,
    )
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], linestyle=LAYER_FORM_STYLE, color="black", label=LAYER_FORM))
    ax.legend(handles=handles, fontsize="x-small", ncol=2)


def evolution_figure(scores: pd.DataFrame, dataset: str, layers: int, stem: Path | None) -> Figure:
    """Figure 3 / S3 / S4 for one dataset and depth: random-init runs, encoder vs decoder."""
    runs = scores[
        (scores["dataset"] == dataset)
        & (scores["layers"] == layers)
        & (scores["init"] == REFERENCE)
        & (scores["reg_weight"] == 0)
    ]
    fig, axes = plt.subplots(3, 2, figsize=(11, 13), constrained_layout=True)
    for ax, metric, panel in zip(axes[0], METRICS, "ab", strict=True):
        for objective, group in runs.groupby("objective"):
            _layer_median(ax, group, metric, f"{objective}-only", COLOURS[objective])
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set(title=_layer_title(panel, metric, _seeds(runs)), xlabel="training step", ylabel=metric)
        ax.legend()
    for row, metric, panel in ((1, "symmetry", "c"), (2, "directionality", "d")):
        for ax, objective in zip(axes[row], ("encoder", "decoder"), strict=True):
            group = runs[runs["objective"] == objective]
            if group.empty:
                ax.set_axis_off()
                continue
            _per_layer(ax, group, metric, f"{panel}) {objective}-only: {metric} per layer")
    fig.suptitle(f"{layers}-layer models trained on {dataset}, random init ({_seeds(runs)} seed(s))")
    _note_other_code(fig, runs)
    if stem is not None:  # None: the figure only (attngeom.plots)
        save(fig, stem)
    return fig


def speedup_note(
    table: pd.DataFrame | None,
    dataset: str,
    layers: int,
    objective: str,
    characters: bool = False,
    decoder_loss: str | None = None,
) -> str:
    """One line per unregularised comparison row of Table 1 (``table1.summarise``) in this group (word
    pieces or ``characters``; decoders of ``decoder_loss`` where given): the speed-up by the rule claims
    use, its interval, the censored pairs, the t-test's p and MDE, the sign-flip test's p, the verdict."""
    if table is None:
        return ""
    rows = table[
        (table["characters"] == characters)
        & (table["dataset"] == dataset)
        & (table["layers"] == layers)
        & (table["objective"] == objective)
        & (table["reg_weight"] == 0)
        & (table["seed_pairs"] > 0)
        & ((table["decoder_loss"] == decoder_loss) if decoder_loss else True)
    ]
    lines = []
    for row in rows.itertuples(index=False):
        speed = f"speedup_{CLAIM_RULE}"
        several = row.seed_pairs > 1
        interval = (
            f" [{getattr(row, speed + '_low'):.1f}, {getattr(row, speed + '_high'):.1f}]" if several else ""
        )
        test = f"; t-test p = {row.signed_p_t:.3f}, {_mde_text(row.mde)}" if several else ""
        floor = least_exact_p(row.seed_pairs)
        exact = (
            f"; sign-flip p = {row.signed_p_sign_flip:.4f} (≥ {floor:.4g} at {row.seed_pairs} seeds)"
            if several
            else ""
        )
        lines.append(
            f"{row.init} vs {row.reference}: speed-up ({CLAIM_RULE}) {getattr(row, speed):.1f}{interval} % over "
            f"{row.seed_pairs} seed pair(s), {row.censored} censored{test}{exact}: {row.verdict}"
        )
    return "\n".join(lines)


def _mde_text(mde: float) -> str:
    """The minimum detectable effect, or why there is none: the seed pairs' speed-ups do not vary (all
    equal, e.g. 0 where no run reached the other's loss), so no effect size follows from their spread."""
    return f"MDE {mde:.1f} %" if math.isfinite(mde) else "no MDE (the seed pairs' speed-ups do not vary)"


def _our_losses(ax, losses: pd.DataFrame, inits: list[str], letter: str) -> None:
    """Panel ``letter``: each run's smoothed loss, one line per seed, per init (random last, on top, with markers:
    it hides under nothing)."""
    for init in sorted(inits, key=lambda i: i == REFERENCE):
        group = losses[losses["init"] == init]
        for i, (_, run) in enumerate(group.groupby("run")):
            label = f"{init} init ({_seeds(group)} seed(s))" if i == 0 else None
            ax.plot(
                run["step"],
                run["loss"],
                STYLES[init],
                color=COLOURS[init],
                linewidth=1,
                label=label,
                **LINE_MARKS[init],
            )
    ax.set(
        title=f"{letter}) training loss (smoothed), ours: each seed a line",
        xlabel="training step",
        ylabel="loss",
    )
    ax.legend(fontsize="small")


def _authors_losses(
    ax, logs: pd.DataFrame, layers: int, datasets: tuple[str, ...], horizon: int, letter: str
) -> None:
    """Panel ``letter``: the authors' runs (their logged 200-update means, one seed) of the counterpart datasets, up
    to our horizon: their random init and their symmetric init (our ``inits.AUTHORS``)."""
    for dataset, marker in zip(datasets, ("o", "s"), strict=False):
        for init in (REFERENCE, AUTHORS):
            run = authors.run_log(logs, layers, dataset, init, horizon)
            name = init if init == REFERENCE else f"{ARM[init].papers_name} init (= {init})"
            ax.plot(
                run["step"], run["loss"], STYLES[init], color=COLOURS[init], marker=marker, markersize=3,
                markevery=0.1, linewidth=1, label=f"authors, {dataset}: {name}",
            )  # fmt: skip
    model = {4: "BERT-mini", 12: "BERT-base"}[layers]
    ax.set(
        title=f"{letter}) training loss, the authors' {model} runs (their logs, one seed)\nup to our horizon",
        xlabel="training step",
        ylabel="loss (200-update mean)",
    )
    ax.legend(fontsize="x-small")


def symmetric_init_figure(
    scores: pd.DataFrame,
    losses: pd.DataFrame,
    dataset: str,
    layers: int,
    objective: str,
    stem: Path,
    table: pd.DataFrame | None = None,
    authors_logs: pd.DataFrame | None = None,
    decoder_loss: str | None = None,
) -> Figure:
    """Figure S5: loss, median symmetry and per-layer symmetry of every init arm among the compared runs
    (``load_runs``' ``twin`` column) of one dataset, depth and objective (decoders of ``decoder_loss`` only,
    where given), every seed; with the authors' logs given, their loss curves of the counterpart runs
    (``authors.counterparts``) beside ours, up to the last step every run of ours reached; with Table 1
    (``runstats.table1.summarise``) given, its speed-up, tests and verdict under the title."""

    def select(frame: pd.DataFrame) -> pd.DataFrame:
        group = (
            (frame["dataset"] == dataset) & (frame["layers"] == layers) & (frame["objective"] == objective)
        )
        if decoder_loss:
            group &= frame["decoder_loss"] == decoder_loss
        return frame[group & frame["twin"].notna()]

    sc, lo = select(scores), select(losses)
    inits = [init for init in INITS if init in set(lo["init"])]
    characters = bool(len(lo)) and bool(lo["characters"].all())
    theirs = authors.counterparts(layers, objective, dataset, characters) if authors_logs is not None else ()
    drawn = theirs if len(lo) else ()
    columns = max(3 if drawn else 2, len(inits))
    fig, axes = plt.subplots(2, columns, figsize=(5.5 * columns, 9), constrained_layout=True, squeeze=False)
    letters = iter("abcdefgh")
    top = iter(axes[0])
    _our_losses(next(top), lo, inits, next(letters))
    if drawn:
        horizon = int(lo.groupby("run")["step"].max().min())  # the last step every run reached, as Table 1
        _authors_losses(next(top), authors_logs, layers, drawn, horizon, next(letters))
    ax = next(top)
    for init in sorted(inits, key=lambda i: i == REFERENCE):
        group = sc[sc["init"] == init]
        if len(group):
            _layer_median(ax, group, "symmetry", f"{init} init", COLOURS[init], STYLES[init])
    ax.set(
        title=_layer_title(next(letters), "symmetry", _seeds(sc)), xlabel="training step", ylabel="symmetry"
    )
    ax.legend(fontsize="small")
    for ax in top:
        ax.set_axis_off()
    for i, ax in enumerate(axes[1]):
        group = sc[sc["init"] == inits[i]] if i < len(inits) else sc.iloc[:0]
        if group.empty:
            ax.set_axis_off()
            continue
        _per_layer(ax, group, "symmetry", f"{next(letters)}) {inits[i]} init: symmetry per layer")
    note = speedup_note(table, dataset, layers, objective, characters, decoder_loss)
    who = f"{objective} ({decoder_loss} loss)" if decoder_loss else objective
    fig.suptitle(
        f"{layers}-layer {who} on {dataset}: init arms compared ({', '.join(inits)})"
        + (f"\n{note}" if note else "")
    )
    _note_other_code(fig, sc)
    save(fig, stem)
    return fig


def horizon_figure(
    ours: pd.DataFrame, theirs: pd.DataFrame, layers: int, characters: bool, stem: Path
) -> Figure:
    """Does an init's speed-up last, and which part of it? Each init's speed-up over random (claim rule,
    percent of the horizon) and its loss gap, with both logs cut at each horizon (``runstats.horizon``):
    ours per seed and their mean, one colour per init, beside the authors' runs of the same depth and
    kind of text (their init against random, one seed each) to 200,000 updates."""
    text = "characters" if characters else "word pieces"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
    inits = [arm.name for arm in ARMS if arm.name in set(ours["init"])]
    for ax, column, label in zip(
        axes,
        ("speedup", "loss_gap"),
        (f"speed-up over random, % of T ({CLAIM_RULE} rule)", "loss gap (nats)"),
        strict=True,
    ):
        for init in inits:
            runs = ours[ours["init"] == init]
            point = "o" if runs["horizon"].nunique() == 1 else None  # runs that stop at the first horizon
            for _, run in runs.groupby("seed"):
                ax.plot(run["horizon"], run[column], color=COLOURS[init], alpha=0.35, linewidth=0.8,
                        marker=point, markersize=3)  # fmt: skip
            mean = runs.groupby("horizon")[column].mean()
            seeds = runs.groupby("horizon")["seed"].nunique()
            shared, n = mean[seeds == seeds.max()], int(seeds.max())
            ax.plot(shared.index, shared.values, color=COLOURS[init], linewidth=2.2, marker=point,
                    label=f"ours, {init}: mean of {n} seed{'s' if n > 1 else ''} (thin: each seed)")  # fmt: skip
        for (dataset, run), marker in zip(theirs.groupby("dataset"), ("o", "s", "^"), strict=False):
            ax.plot(run["horizon"], run[column], "--", color="black", marker=marker, markersize=3,
                    linewidth=1, label=f"authors, {AUTHORS}, {dataset} (one seed)")  # fmt: skip
        ax.axhline(0, color="grey", linewidth=0.6)
        ax.set(xscale="log", xlabel="horizon T (updates; both logs cut there)", ylabel=label)
        ax.legend(fontsize="x-small")
    axes[0].set_title("a) speed-up of each init over random")
    axes[1].set_title("b) loss gap, each init minus random")
    fig.suptitle(f"Does the speed-up last? {layers}-layer encoders, {text}: measured at every horizon")
    save(fig, stem)
    return fig


def official_figure(scores: pd.DataFrame, official: pd.DataFrame, stem: Path) -> Figure:
    """Our runs (solid) over the authors' published evolution (dashed), per objective: the same depth,
    objective and dataset where they published it, else the nearest (``nearest_official``), labelled so."""
    ours, theirs = ours_medians(scores), official_medians(official)
    nearest = nearest_official(ours, official)
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True, sharex=True)
    for col, objective in enumerate(("encoder", "decoder")):
        drawn = nearest[nearest["objective"] == objective].drop_duplicates(["layers", "dataset"])
        for row, metric in enumerate(METRICS):
            ax = axes[row, col]
            for ref in drawn.itertuples(index=False):
                group = theirs[
                    (theirs["objective"] == objective)
                    & (theirs["layers"] == ref.layers)
                    & (theirs["dataset"] == ref.dataset)
                ]
                kind = "same setting" if ref.exact else "nearest published, not our setting"
                label = f"authors: {ref.layers}L {ref.dataset} ({kind})"
                ax.plot(group["step"], group[metric], "--", alpha=0.8, label=label)
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
                title=f"{objective}-only: {metric}\nof the {LAYER_FORM}, median over layers",
                xlabel="training step",
                ylabel=metric,
            )
            ax.legend(fontsize="x-small")
    note = official_note(ours, official)
    if note:
        fig.suptitle(note, fontsize="small", wrap=True)
    _note_other_code(fig, scores)
    save(fig, stem)
    return fig
