"""Rule reference_comparison: this run vs the paper's published per-layer scores, with known defects."""

from pathlib import Path

import pandas as pd

from attngeom import tables
from attngeom.records import read_scores

per_layer, per_model = tables.compare_with_reference(
    read_scores(snakemake.input.scores),
    tables.read_table(snakemake.input.models),
    pd.read_csv(snakemake.input.reference),
    tables.known_defects(snakemake.input.defects),
)
tables.write_csv(per_layer, snakemake.output.layers)
tables.write_table(
    tables.comparison_display(per_model),
    Path(snakemake.output.table[0]).with_suffix(""),
    "This run vs the paper's published per-layer scores (medians over layers, largest layer difference)",
    csv=per_model,
    empty=tables.NOTHING_TO_COMPARE,
)
