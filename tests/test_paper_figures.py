"""Figures 2 / S1 / S2: pretrained models in the main panels, controls and trained runs in their own panel
(random vs symmetric init told apart), the heatmap's representative layer and its stated colour clip."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attngeom.errors import InputError
from attngeom.report import score_figures


def summary_row(model: str, objective: str, role: str, median: float, groups=("figure_2",), **extra) -> dict:
    return {
        "model": model,
        "display": model.rsplit("/", 1)[-1],
        "modality": "language",
        "objective": objective,
        "role": role,
        "groups": list(groups),
        "n_params": 1e8,
        "status": "ok",
        "reason": "",
        "stack": "encoder" if objective == "bidirectional" else "decoder",
        **{f"symmetry_{w}": v for w, v in (("median", median), ("minus", 0.05), ("plus", 0.05))},
        **{f"directionality_{w}": v for w, v in (("median", -median), ("minus", 0.05), ("plus", 0.05))},
        **extra,
    }


SUMMARY = pd.DataFrame(
    [
        summary_row("bert", "bidirectional", "pretrained", 0.6),
        summary_row("gpt2", "autoregressive", "pretrained", 0.1, n_params=1.2e8),
        summary_row("random/bert", "bidirectional", "random", 0.0),
        summary_row("trained/enc-random-s0", "bidirectional", "trained", 0.9),
        summary_row("trained/enc-symmetric-s0", "bidirectional", "trained", 1.0),
    ]
)
INITS = {"trained/enc-random-s0": "random", "trained/enc-symmetric-s0": "symmetric"}


def points(ax) -> list[tuple[float, float, str, str]]:
    """(x, y, marker, marker face colour) of every error-bar point of an axis."""
    found = []
    for container in ax.containers:
        line = container.lines[0]
        found.append(
            (line.get_xdata()[0], line.get_ydata()[0], line.get_marker(), line.get_markerfacecolor())
        )
    return found


def test_figure_2_main_panels_hold_only_pretrained_models_and_controls_get_their_own(tmp_path):
    matrix = np.arange(16.0).reshape(4, 4) - 8
    panels = [("enc, layer 1", matrix, ""), ("dec, layer 0", None, "not available: gated")]
    fig = score_figures.figure_2(SUMMARY, panels, tmp_path / "figure_2", INITS)
    main, controls, heatmap = fig.axes[0], fig.axes[1], fig.axes[2]
    assert sorted(y for _, y, _, _ in points(main)) == [0.1, 0.6]  # pretrained only
    found = points(controls)
    assert [x for x, *_ in found] == [0, 1, 2]  # one position each: the control first
    markers = {y: (marker, face) for _, y, marker, face in found}
    assert markers[0.0][0] == "o" and markers[0.0][1] == "white"  # hollow: random-initialised control
    assert markers[0.9][0] == "^" and markers[1.0][0] == "*"  # trained: random vs symmetric init
    assert [t.get_text() for t in controls.get_xticklabels()] == ["bert", "enc-random-s0", "enc-symmetric-s0"]
    assert "99th percentile" in fig.axes[-1].get_ylabel()  # the heatmap's colour bar states its clip
    assert heatmap.get_title() == "enc, layer 1"
    assert (tmp_path / "figure_2.png").stat().st_size > 0


def test_without_controls_figure_2_has_no_controls_panel(tmp_path):
    pretrained = SUMMARY[SUMMARY["role"] == "pretrained"]
    fig = score_figures.figure_2(pretrained, [], tmp_path / "figure_2")
    assert len(fig.axes) == 2


def test_figure_s1_with_only_controls_says_it_has_no_pretrained_model(tmp_path):
    rows = SUMMARY[SUMMARY["role"] != "pretrained"].assign(groups=[["figure_s1"]] * 3)
    fig = score_figures.figure_groups(rows, "figure_s1", "objective", "S1", tmp_path / "s1", INITS)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["no pretrained model in this group"]
    assert len(points(fig.axes[2])) == 3


def layer_scores(values: list[float], stack: str = "encoder") -> list[dict]:
    return [
        {"model_id": "m", "stack": stack, "layer": i, "head": pd.NA, "symmetry": v, "directionality": -v}
        for i, v in enumerate(values)
    ]


def test_the_representative_layer_is_the_one_closest_to_the_models_median():
    scores = pd.DataFrame(layer_scores([0.9, 0.1, 0.5, 0.44, 0.2]) + layer_scores([0.4, 0.4], "cross"))
    scores["head"] = scores["head"].astype("Int64")
    assert score_figures.representative_layer(scores, "symmetry") == ("encoder", 3, 0.44, 0.44)
    tie = pd.DataFrame(layer_scores([0.0, 1.0]))
    tie["head"] = tie["head"].astype("Int64")
    assert score_figures.representative_layer(tie, "directionality")[:2] == (
        "encoder",
        0,
    )  # the lower on a tie
    with pytest.raises(InputError, match="no scored self-attention layer"):
        score_figures.representative_layer(tie.iloc[0:0], "symmetry")


def test_figure_2_legends_cover_no_error_bar_and_an_empty_panel_has_no_parameter_axis(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    summary = pd.DataFrame(
        [
            summary_row("enc", "bidirectional", "pretrained", 0.49, n_params=2.2e7),
            summary_row("dec", "autoregressive", "pretrained", 0.09, n_params=1.35e8),
            summary_row("random/enc", "bidirectional", "random", 0.0),
            summary_row("random/dec", "autoregressive", "random", 0.01),
        ]
    )
    fig = score_figures.figure_2(summary, [], tmp_path / "f2")
    renderer = FigureCanvasAgg(fig).get_renderer()
    checked = 0
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        box = legend.get_window_extent(renderer)
        for line in ax.get_lines() + [c for c in ax.collections]:
            extent = line.get_window_extent(renderer)
            if extent.width > 0 or extent.height > 0:
                assert not box.overlaps(extent), (ax.get_title(), line)
                checked += 1
    assert checked >= 8
    lonely = pd.DataFrame([summary_row("random/vit", "bidirectional", "random", 0.0, groups=("figure_s1",))])
    fig = score_figures.figure_groups(lonely, "figure_s1", "objective", "S1", tmp_path / "s1")
    top = fig.axes[0]
    assert top.get_xticks().size == 0 and top.get_yticks().size == 0 and top.get_xscale() == "linear"


def drawn_beyond_the_figure(fig, path) -> list[str]:
    """Saved as the docs show (``fig.savefig(path)``, no ``bbox_inches``): what is drawn off the page.
    Every text but the tick labels (titles, axis labels, legends, notes) is checked by itself, to name it;
    ``get_tightbbox`` bounds everything drawn, tick labels in view included."""
    from matplotlib.text import Text

    fig.savefig(path)
    renderer = fig.canvas.get_renderer()
    page = fig.bbox.padded(1)  # a pixel for antialiasing

    def off_page(box) -> bool:
        return not (page.contains(box.x0, box.y0) and page.contains(box.x1, box.y1))

    ticks = {
        id(label)
        for ax in fig.axes
        for label in ax.get_xticklabels(which="both") + ax.get_yticklabels(which="both")
    }
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text() and id(t) not in ticks]
    outside = [f"{t.get_text()[:50]!r}" for t in texts if off_page(t.get_window_extent(renderer))]
    drawn = fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
    return outside + ([f"everything drawn: {drawn}"] if off_page(drawn) else [])


def test_figures_saved_as_documented_keep_every_title_and_note_on_the_page(tmp_path):
    from attngeom import Results, plots

    matrix = np.random.default_rng(0).normal(size=(16, 16))
    name = "meta-llama/Llama-3.2-1B-Instruct (pretrained)"
    panels = [
        (f"{name}, {stack} layer 1: the most representative layer\n(symmetry 0.12; median 0.10)", matrix, "")
        for stack in ("encoder", "decoder")
    ]
    failed = summary_row("local/corrupt", "bidirectional", "pretrained", np.nan, status="failed")
    failed["reason"] = "model.safetensors: header is not valid JSON (the file is damaged; download it again)"
    summary = pd.concat([SUMMARY, pd.DataFrame([failed])], ignore_index=True)
    groups = summary.assign(groups=[["figure_2", "figure_s1", "figure_s2"]] * len(summary))
    empty = pd.DataFrame()
    results = Results(tmp_path, empty, empty, empty, groups, heatmaps=panels)
    for make in (plots.figure_2, plots.figure_s1, plots.figure_s2):
        fig = make(results)
        assert drawn_beyond_the_figure(fig, tmp_path / f"{make.__name__}.png") == [], make.__name__
        assert any("not scored: corrupt" in t.get_text() for t in fig.texts)  # the note is drawn


def test_a_figure_whose_group_holds_no_model_says_so(tmp_path):
    from attngeom.report.summary import collect, summarise

    summary = summarise(*collect([], [], []))  # what the rule script builds when the group is empty
    fig = score_figures.figure_groups(
        summary, "figure_s1", "objective", "Vision and audio models", tmp_path / "s1"
    )
    assert [t.get_text() for t in fig.texts] == [
        "Vision and audio models",
        "No models in this group: the config puts no model in figure_s1.",
    ]
    assert (tmp_path / "s1.pdf").read_bytes()[:4] == b"%PDF" and (tmp_path / "s1.png").stat().st_size > 1000


def test_a_config_of_language_models_only_draws_figures_s1_and_s2_that_say_they_are_empty(tmp_path):
    """Both figure jobs ran on the empty group and crashed (KeyError: 'role'), with no log."""
    from pipeline_support import TINY_MODELS, run_snakemake, write_config

    config = write_config(tmp_path / "language.yaml", TINY_MODELS[:2])  # BERT and Llama: no S1/S2 model
    targets = [
        f"results/figures/{figure}.{kind}" for figure in ("figure_s1", "figure_s2") for kind in ("pdf", "png")
    ]
    run_snakemake("--cores", "1", *targets, "--configfile", str(config), cwd=tmp_path)
    for figure in ("figure_s1", "figure_s2"):
        assert (tmp_path / "results" / "figures" / f"{figure}.pdf").read_bytes()[:4] == b"%PDF"
        log = (tmp_path / "results" / "logs" / f"{figure}.log").read_text()
        assert log == f"{figure}: 0 model(s): drawn as a figure that says it is empty\n"
