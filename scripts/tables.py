"""Rule tables: the summary of every model (a CSV and a page for the report), Tables S2 (symmetry) and S3
(directionality) in the paper's layout (attngeom.report.tables_s2_s3)."""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from pathlib import Path

from attngeom.files import write_text
from attngeom.records import read_scores
from attngeom.report import tables_s2_s3
from attngeom.report.summary import read_table, summarise, write_record_csv
from attngeom.report.summary_page import summary_html

scores = read_scores(snakemake.input.scores)
summary = summarise(scores, read_table(snakemake.input.models))
write_record_csv(summary, snakemake.output.summary)
write_text(snakemake.output.summary_page, summary_html(summary))
variants = scores["variant"].dropna().unique()
for metric, outputs in (("symmetry", snakemake.output.s2), ("directionality", snakemake.output.s3)):
    tables_s2_s3.write(summary, metric, variants, Path(outputs[0]).with_suffix(""))
print(f"tables: the summary of {len(summary)} rows, Tables S2 and S3 ({', '.join(map(str, variants))})")
