"""Rule figure_heads: the per-head view of one model (distribution of per-head scores per layer)."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from pathlib import Path

from attngeom.report.score_figures import heads_figure
from attngeom.report.summary import model_records

status, scores = model_records(snakemake.params.model, snakemake.input.scores, snakemake.input.status)
heads_figure(
    scores,
    snakemake.params.title,
    Path(snakemake.output[0]).with_suffix(""),
    status.get("reason", ""),
)
print(f"figure_heads: {snakemake.params.title}: {len(scores)} rows ({status['status']})")
