"""Snakemake script: every model's scores in one Parquet file, and the model table with each status."""

from attngeom.records import write_scores
from attngeom.tables import collect, write_text


def main(snakemake) -> None:
    scores, models = collect(snakemake.params.models, snakemake.input.scores, snakemake.input.status)
    if scores.empty:
        raise SystemExit("no model could be scored; see the failures in the score logs")
    write_scores(scores, snakemake.output.scores)
    write_text(models.to_csv(index=False), snakemake.output.models)


main(snakemake)  # noqa: F821
