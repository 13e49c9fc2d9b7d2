"""Rule reference_comparison: this run vs the paper's published per-layer scores, with known defects; when
no model of the run was published, a sentence says so and names the nearest published models."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from pathlib import Path

import pandas as pd

from attngeom.artifacts import ARTIFACT
from attngeom.pipeline.captions import nearest_published
from attngeom.records import read_scores
from attngeom.report import reference_comparison
from attngeom.report.summary import read_table
from attngeom.tables.formats import write_csv, write_table

models = read_table(snakemake.input.models)
reference = pd.read_csv(snakemake.input.reference)
per_layer, per_model = reference_comparison.compare_with_reference(
    read_scores(snakemake.input.scores),
    models,
    reference,
    reference_comparison.known_defects(snakemake.input.defects),
)
write_csv(per_layer, snakemake.output.layers)
write_table(
    reference_comparison.comparison_display(per_model),
    Path(snakemake.output.table[0]).with_suffix(""),
    ARTIFACT["reference_comparison"].title,
    csv=per_model,
    empty=" ".join(
        filter(None, [reference_comparison.NOTHING_TO_COMPARE, nearest_published(models, reference)])
    ),
)
print(
    f"reference_comparison: {len(per_model)} models of this run compared with the paper's ({len(per_layer)} layers)"
)
