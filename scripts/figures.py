"""Snakemake script: Figure 2, S1 or S2 from the summary table (``params.figure`` picks which)."""

from pathlib import Path

import numpy as np

from attngeom import figures, tables


def heatmap_panel(path: str) -> tuple[str, np.ndarray | None, str]:
    with np.load(path) as data:
        matrix, reason, title = data["matrix"], str(data["reason"]), str(data["title"])
    return title, (matrix if matrix.size else None), (f"not available: {reason}" if reason else "")


def main(snakemake) -> None:
    summary = tables.read_table(snakemake.input.summary)
    stem = str(Path(snakemake.output[0]).with_suffix(""))
    if snakemake.params.figure == "2":
        panels = [heatmap_panel(path) for path in snakemake.input.heatmaps]
        figures.figure_2(summary, panels, stem)
    elif snakemake.params.figure == "S1":
        figures.figure_groups(summary, "figure_s1", "objective", "Vision and audio models", stem)
    else:
        figures.figure_groups(
            summary, "figure_s2", "stack", "Encoder-decoder models: encoder vs decoder stack", stem
        )


main(snakemake)  # noqa: F821
