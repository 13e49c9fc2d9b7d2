"""Snakemake script: this run vs the paper's published per-layer scores, with known reference defects."""

from pathlib import Path

import pandas as pd

from attngeom import tables
from attngeom.records import read_scores


def main(snakemake) -> None:
    scores = read_scores(snakemake.input.scores)
    models = tables.read_table(snakemake.input.models)
    reference = pd.read_csv(snakemake.input.reference)
    defects = tables.known_defects(snakemake.input.defects)
    per_layer, per_model = tables.compare_with_reference(scores, models, reference, defects)
    tables.write_text(per_layer.to_csv(index=False), snakemake.output.layers)
    title = (
        "This run vs the paper's published per-layer scores (medians over layers, largest layer difference)"
    )
    tables.write_table(
        tables.comparison_display(per_model),
        str(Path(snakemake.output.table[0]).with_suffix("")),
        title,
        csv=per_model,
    )


main(snakemake)  # noqa: F821
