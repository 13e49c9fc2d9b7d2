"""Rule tables: the summary of every model, Tables S2 (symmetry) and S3 (directionality)."""

from pathlib import Path

from attngeom import tables
from attngeom.records import read_scores

scores = read_scores(snakemake.input.scores)
summary = tables.summarise(scores, tables.read_table(snakemake.input.models))
tables.write_csv(summary, snakemake.output.summary)
for metric, outputs, group, name in (
    ("symmetry", snakemake.output.s2, "table_s2", "Table S2: symmetry score"),
    ("directionality", snakemake.output.s3, "table_s3", "Table S3: directionality score"),
):
    members = tables.in_group(summary, group)
    full = members[["model", "stack", "n_params", "n_layers", "status", "reason"]].join(
        members[[f"{metric}_median", f"{metric}_minus", f"{metric}_plus"]]
    )
    title = f"{name}, median over layers and interquartile distances (median − p25, p75 − median)"
    empty = f"No model of this run is in {group} (the `groups` of each model in the config)."
    tables.write_table(
        tables.paper_table(members, metric), Path(outputs[0]).with_suffix(""), title, full, empty
    )
