"""Snakemake script: the summary of every model, Tables S2 (symmetry) and S3 (directionality)."""

from pathlib import Path

from attngeom import tables
from attngeom.records import read_scores


def stem_of(files: list[str]) -> str:
    """``x`` from the outputs ``x.csv``, ``x.md``, ``x.tex``."""
    return str(Path(files[0]).with_suffix(""))


def main(snakemake) -> None:
    scores = read_scores(snakemake.input.scores)
    models = tables.read_table(snakemake.input.models)
    summary = tables.summarise(scores, models)
    tables.write_text(summary.to_csv(index=False), snakemake.output.summary)
    for metric, stem, name in (
        ("symmetry", stem_of(snakemake.output.s2), "Table S2: symmetry score"),
        ("directionality", stem_of(snakemake.output.s3), "Table S3: directionality score"),
    ):
        group = "table_s2" if metric == "symmetry" else "table_s3"
        members = summary[summary["groups"].str.split(",").apply(lambda g, group=group: group in g)]
        full = members[["model", "stack", "n_params", "n_layers", "status", "reason"]].join(
            members[[f"{metric}_median", f"{metric}_minus", f"{metric}_plus"]]
        )
        title = f"{name}, median over layers and interquartile distances (median − p25, p75 − median)"
        tables.write_table(tables.paper_table(members, metric), stem, title, csv=full)


main(snakemake)  # noqa: F821
