"""Rules evolution_figure (Figures 3 / S3 / S4), symmetric_init_figure (S5: every init arm, the authors'
loss curves beside ours, Table 1's speed-ups, tests and verdicts of its runs) and official_figure (ours vs the authors' published evolution, or the nearest
published run), from the run folders of the rule's input."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from pathlib import Path

import pandas as pd

from attngeom.report import training_figures
from attngeom.runstats.authors import read_logs
from attngeom.runstats.table1 import table1

runs = [Path(final).parent for final in snakemake.input.finals]
scores, losses = training_figures.load_runs(runs)
stem = Path(snakemake.output[0]).with_suffix("")
w = snakemake.wildcards
if snakemake.rule == "evolution_figure":
    training_figures.evolution_figure(scores, w.dataset, int(w.layers), stem)
elif snakemake.rule == "symmetric_init_figure":
    logs = read_logs(Path(snakemake.input.authors).parent)
    table = table1(runs, authors_logs=logs)
    objective, _, decoder_loss = w.objective.partition("_")  # decoder_<loss>: one loss a figure
    training_figures.symmetric_init_figure(
        scores,
        losses,
        w.dataset,
        int(w.layers),
        objective,
        stem,
        table,
        logs,
        decoder_loss=decoder_loss or None,
    )
else:
    training_figures.official_figure(scores, pd.read_csv(snakemake.input.official), stem)
print(f"{snakemake.rule}: {len(runs)} runs drawn in {stem}.pdf and .png")
