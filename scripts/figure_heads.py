"""Rule figure_heads: the per-head view of one model (distribution of per-head scores per layer)."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

import json
from pathlib import Path

import pandas as pd

from attngeom.records import read_scores
from attngeom.report.score_figures import heads_figure

status = json.loads(Path(snakemake.input.status).read_text())
scores = read_scores(snakemake.input.scores) if status["status"] == "ok" else pd.DataFrame()
heads_figure(
    scores,
    snakemake.params.title,
    Path(snakemake.output[0]).with_suffix(""),
    status.get("reason", ""),
)
print(f"figure_heads: {snakemake.params.title}: {len(scores)} rows ({status['status']})")
