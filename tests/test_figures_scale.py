"""Figure 2 at Hub scale: past ``CROWDED`` models a panel is a cloud of every model plus one marker per
family, and the models not scored are counted by reason; at the paper's ~100 models every model keeps
its own marker."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.collections import PathCollection
from test_paper_figures import summary_row

from attngeom.report import crowded_panels, score_figures


def zoo_summary(n: int, families: int, failed: int) -> pd.DataFrame:
    """``n`` scored pretrained models spread over ``families`` families (half encoders, half decoders)
    and ``failed`` gated ones."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        objective = ("bidirectional", "autoregressive")[i % 2]
        family = f"family{i % families}"
        median = float(rng.uniform(-0.2, 0.8))
        rows.append(
            summary_row(f"org/{family}-{i}", objective, "pretrained", median, family=family, n_params=1e8 + i)
        )
    for i in range(failed):
        row = summary_row(f"gated/m-{i}", "autoregressive", "pretrained", np.nan, family="llama")
        rows.append(
            {**row, "status": "failed", "reason": f"gated/m-{i}: gated repository (HTTP 401); log in"}
        )
    return pd.DataFrame(rows)


def errorbar_points(ax) -> int:
    return sum(len(container.lines[0].get_xdata()) for container in ax.containers)


def dots(ax) -> int:
    return sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))


def test_a_crowded_panel_shows_every_model_as_a_dot_and_each_family_once(tmp_path):
    n, families = 1200, 10
    summary = zoo_summary(n, families, failed=50)
    assert crowded_panels.crowded(summary[summary["status"] == "ok"])
    fig = score_figures.figure_2(summary, [], tmp_path / "figure_2")
    symmetry = fig.axes[0]
    assert dots(symmetry) == n  # every scored model, none twice
    # one marker per (family, objective): even families are encoders here, odd ones decoders
    assert errorbar_points(symmetry) == families
    assert all(c.get_rasterized() for c in symmetry.collections if isinstance(c, PathCollection))
    note = " ".join(t.get_text() for t in fig.texts)
    assert "50 models, by reason: gated repository (HTTP 401) ×50" in note
    assert "gated/m-0" not in note  # counted, not named one by one
    assert (tmp_path / "figure_2.pdf").stat().st_size > 0 and (tmp_path / "figure_2.png").stat().st_size > 0


def test_at_the_papers_size_every_model_keeps_its_own_marker(tmp_path):
    summary = zoo_summary(100, 10, failed=3)
    fig = score_figures.figure_2(summary, [], tmp_path / "figure_2")
    assert errorbar_points(fig.axes[0]) == 100 and dots(fig.axes[0]) == 0
    note = " ".join(t.get_text() for t in fig.texts)
    assert all(f"m-{i}: gated/m-{i}: gated repository" in note for i in range(3))  # each one named
