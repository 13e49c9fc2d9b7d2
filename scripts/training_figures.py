"""Rules evolution_figure (Figures 3 / S3 / S4), symmetric_init_figure (S5, with Table 1's speed-up, null
and verdict of its runs) and official_figure (ours vs the authors' published evolution, or the nearest
published run), from the run folders of the rule's input."""

from pathlib import Path

import pandas as pd

from attngeom.report import training_figures
from attngeom.training.speedup import table1

runs = [Path(final).parent for final in snakemake.input.finals]
scores, losses = training_figures.load_runs(runs)
stem = Path(snakemake.output[0]).with_suffix("")
w = snakemake.wildcards
if snakemake.rule == "evolution_figure":
    training_figures.evolution_figure(scores, w.dataset, int(w.layers), stem)
elif snakemake.rule == "symmetric_init_figure":
    training_figures.symmetric_init_figure(
        scores, losses, w.dataset, int(w.layers), w.objective, stem, table1(runs)
    )
else:
    training_figures.official_figure(scores, pd.read_csv(snakemake.input.official), stem)
