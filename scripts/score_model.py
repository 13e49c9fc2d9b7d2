"""Rule score: one model scored in this process as ``attngeom score`` scores it (``engine.score_to_file``),
with the config's id as its ``model_id``.

Run locally, the job holds GPUs of its own while it scores (attngeom.pipeline.gpus: none for a CPU job).
Whatever happens the job writes its status (ok, failed or crashed, and why; attngeom.pipeline.outcome)
and a Parquet file (empty when not scored), so the other models' tables and figures are made.
"""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

import torch

from attngeom import interrupts
from attngeom.pipeline.outcome import ScoreJob, ScoreOptions, score_and_record

interrupts.install()  # SIGTERM (a cancelled job): one line, no half-written file

p = snakemake.params
out = snakemake.output
torch.set_num_threads(snakemake.threads)
job = ScoreJob(p.model, p.location, p.revision, out.scores, out.status, snakemake.log[0], p.local)
options = ScoreOptions(p.device, p.dtype, p.variant, p.full_download)
score_and_record(job, options, gpus=int(snakemake.resources.get("gpu", 0)))
