"""Rule aggregate: every model's scores in one Parquet file, and the model table with each status."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from attngeom.records import write_scores
from attngeom.report.summary import collect, write_record_csv

scores, models = collect(snakemake.params.models, snakemake.input.scores, snakemake.input.status)
write_scores(scores, snakemake.output.scores)
write_record_csv(models, snakemake.output.models)
print(f"aggregate: {len(scores)} rows of {len(models)} models ({models['status'].value_counts().to_dict()})")
