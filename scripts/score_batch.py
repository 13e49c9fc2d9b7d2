"""Rule score_zoo: a batch of a zoo's models, each scored like rule score's one (attngeom.pipeline.batches),
into the batch's two record files: every scored model's rows, and every model's status whatever became of
the others; each model's log in turn in the batch's log.
"""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

from attngeom import interrupts
from attngeom.pipeline.batches import BatchFiles, score_into
from attngeom.pipeline.outcome import ScoreOptions

interrupts.install()  # SIGTERM (a cancelled job): one line, no half-written file

p = snakemake.params
files = BatchFiles(snakemake.output.scores, snakemake.output.status, snakemake.log[0])
options = ScoreOptions(p.device, p.dtype, p.variant, p.full_download)
models = list(zip(p.models, p.locations, p.revisions, strict=True))
score_into(models, files, options, snakemake.threads, int(snakemake.resources.get("gpu", 0)))
