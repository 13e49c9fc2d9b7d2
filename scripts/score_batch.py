"""Rules score_zoo_*: a batch of a zoo's models, each scored like rule score's one (attngeom.pipeline.batches).

Every model gets its Parquet file (empty when not scored) and its status, whatever becomes of the others.
"""

from attngeom.pipeline.job_log import to_model_logs

to_model_logs(snakemake.log)  # each model's messages in its own log; an error that ends the batch in all

from attngeom import interrupts
from attngeom.pipeline.batches import score_batch
from attngeom.pipeline.outcome import ScoreJob, score_options

interrupts.install()  # SIGTERM (a cancelled job): one line, no half-written file

p = snakemake.params
out = snakemake.output
files = zip(p.models, p.locations, p.revisions, out.scores, out.status, snakemake.log, strict=True)
jobs = [ScoreJob(*fields) for fields in files]
options = score_options(p.device, p.dtype, p.variant, p.full_download)
score_batch(jobs, options, snakemake.threads, int(snakemake.resources.get("gpu", 0)))
