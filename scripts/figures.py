"""Rules figure_2, figure_s1, figure_s2: the paper's scatter figures from the summary table."""

from pathlib import Path

import numpy as np

from attngeom import figures, tables


def heatmap_panel(path: str) -> tuple[str, np.ndarray | None, str]:
    with np.load(path) as data:
        matrix, reason, title = data["matrix"], str(data["reason"]), str(data["title"])
    return title, (matrix if matrix.size else None), (f"not available: {reason}" if reason else "")


summary = tables.read_table(snakemake.input.summary)
stem = Path(snakemake.output[0]).with_suffix("")
if snakemake.rule == "figure_2":
    figures.figure_2(summary, [heatmap_panel(path) for path in snakemake.input.heatmaps], stem)
elif snakemake.rule == "figure_s1":
    figures.figure_groups(summary, "figure_s1", "objective", "Vision and audio models", stem)
else:
    title = "Encoder-decoder models: encoder vs decoder stack"
    figures.figure_groups(summary, "figure_s2", "stack", title, stem)
