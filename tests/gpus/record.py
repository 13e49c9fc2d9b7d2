"""A job of tests/gpus/Snakefile: hold the GPUs it needs for a while; write what CUDA_VISIBLE_DEVICES was."""

import json
import os
import time

from attngeom.files import write_text
from attngeom.pipeline.gpus import job_gpus

resources = snakemake.resources
with (
    open(snakemake.log[0], "w") as log,
    job_gpus(int(resources.gpu), log, slots=int(resources.get("gpu_slots", 0))) as held,
):
    seen = os.environ.get("CUDA_VISIBLE_DEVICES")
    time.sleep(snakemake.params.seconds)
write_text(snakemake.output[0], json.dumps({"held": held, "seen": seen}))
