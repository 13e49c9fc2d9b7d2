"""Rule training_tables: Table 1 (final loss and the speed-up of each init arm over seeds, with three tests,
the null, the paper's numbers and the authors' runs at the same horizon, grouped by depth as the paper
prints it), the paper's claims against the runs, and our symmetry/directionality medians next to the
authors' published evolution where a run matches (else a sentence naming the nearest)."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from pathlib import Path

import pandas as pd

from attngeom.artifacts import ARTIFACT
from attngeom.report.scoring_code import other_code_note
from attngeom.report.training_figures import load_runs
from attngeom.runstats.authors import read_logs
from attngeom.runstats.claims import write_claims
from attngeom.runstats.official import compare_official, official_note, ours_medians
from attngeom.runstats.table1 import table1
from attngeom.runstats.table1_display import write_table1
from attngeom.tables.formats import write_table

runs = [Path(final).parent for final in snakemake.input.finals]
table = table1(runs, pd.read_csv(snakemake.input.paper), read_logs(Path(snakemake.input.authors).parent))
write_table1(table, Path(snakemake.output.table_1[0]).with_suffix(""), ARTIFACT["table_1"].title)
scores, _ = load_runs(runs)
other_code = other_code_note(scores)  # runs whose evolution other scoring code computed
claims = ARTIFACT["claims"].title
write_claims(scores, table, Path(snakemake.output.claims[0]).with_suffix(""), claims, other_code)
official = pd.read_csv(snakemake.input.official)
comparison = compare_official(scores, official)
write_table(
    comparison.round(3),
    Path(snakemake.output.official[0]).with_suffix(""),
    ARTIFACT["official_comparison"].title,
    csv=comparison,
    empty=(
        "No run here has the depth, objective and dataset of a run in the authors' published evolution "
        "(config/reference/official_training_evolution.csv), so there is nothing to compare step by step. "
        + official_note(ours_medians(scores), official)
    ),
    caption=other_code,
)
print(
    f"training_tables: Table 1 ({len(table)} rows), the claims and the comparison with the authors' of {len(runs)} runs"
)
