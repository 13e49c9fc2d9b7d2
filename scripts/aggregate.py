"""Rule aggregate: every model's scores in one Parquet file, and the model table with each status."""

from attngeom.records import write_scores
from attngeom.report.summary import collect, write_record_csv

scores, models = collect(snakemake.params.models, snakemake.input.scores, snakemake.input.status)
write_scores(scores, snakemake.output.scores)
write_record_csv(models, snakemake.output.models)
