"""Rule tables: the summary of every model, Tables S2 (symmetry) and S3 (directionality) in the paper's
layout (attngeom.paper_tables)."""

from pathlib import Path

from attngeom import paper_tables, tables
from attngeom.records import read_scores

scores = read_scores(snakemake.input.scores)
summary = tables.summarise(scores, tables.read_table(snakemake.input.models))
tables.write_csv(summary, snakemake.output.summary)
variants = scores["variant"].dropna().unique()
for metric, outputs in (("symmetry", snakemake.output.s2), ("directionality", snakemake.output.s3)):
    paper_tables.write(summary, metric, variants, Path(outputs[0]).with_suffix(""))
