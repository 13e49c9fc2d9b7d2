"""Rules figure_2, figure_s1, figure_s2: the paper's scatter figures; the models trained here marked by
their initialisation, read from each run folder's config.yaml. Figure 2 reads the summary table of every
model; Figures S1 and S2 summarise the scores of their own models only, so that a figure of pretrained
models never waits for the training runs. A figure whose group holds no model says so (the log too)."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from pathlib import Path

import numpy as np

from attngeom.artifacts import ARTIFACT
from attngeom.pipeline.training_runs import trained_model_id
from attngeom.report import score_figures
from attngeom.report.summary import collect, in_group, read_table, summarise
from attngeom.training.runs import RunInfo


def heatmap_panel(path: str) -> tuple[str, np.ndarray | None, str]:
    with np.load(path) as data:
        matrix, reason, title = data["matrix"], str(data["reason"]), str(data["title"])
    return title, (matrix if matrix.size else None), (f"not available: {reason}" if reason else "")


if snakemake.rule == "figure_2":
    summary = read_table(snakemake.input.summary)
else:
    scores, models = collect(snakemake.params.models, snakemake.input.scores, snakemake.input.status)
    summary = summarise(scores, models)
runs = [RunInfo.read(Path(final).parent) for final in snakemake.input.runs]
inits = {trained_model_id(run.name): run.config.init for run in runs}
stem = Path(snakemake.output[0]).with_suffix("")
figure = ARTIFACT[snakemake.rule]
members = in_group(summary, figure.name)["model"].nunique()
print(f"{figure.name}: {members} model(s)" + ("" if members else ": drawn as a figure that says it is empty"))
if figure.hue is None:  # Figure 2
    score_figures.figure_2(summary, [heatmap_panel(path) for path in snakemake.input.heatmaps], stem, inits)
else:
    score_figures.figure_groups(summary, figure.name, figure.hue, figure.title, stem, inits)
