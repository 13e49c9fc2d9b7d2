"""Rule score: ``attngeom score`` of one model, in this process, with the config's id as its ``model_id``.

Run locally, the job holds GPUs of its own while it scores (attngeom.pipeline.gpus: none for a CPU job).
Whatever happens the job writes its status (ok, failed or crashed, and why; attngeom.pipeline.outcome)
and a Parquet file (empty when not scored), so the other models' tables and figures are made.
"""

import json
import shlex
import time

import pandas as pd

from attngeom.files import atomic_path, write_text
from attngeom.pipeline.gpus import job_gpus
from attngeom.pipeline.outcome import portable, run_cli

p = snakemake.params
out = snakemake.output
argv = ["score", p.location, "--model-id", p.model, "-o", out.scores, "--device", p.device]
argv += ["--dtype", p.dtype, "--variant", p.variant, "--quiet"]
argv += (["--revision", p.revision] if p.revision else []) + (["--full-download"] if p.full_download else [])
start = time.monotonic()
with open(snakemake.log[0], "w") as log, job_gpus(int(snakemake.resources.get("gpu", 0)), log):
    log.write(f"attngeom {shlex.join(argv)}\n")
    outcome = run_cli(argv, log)
record = {"model": p.model, "seconds": round(time.monotonic() - start, 3), **outcome}
if "reason" in record:
    record["reason"] = portable(record["reason"], {p.location: p.model})
if record["status"] != "ok":
    with atomic_path(out.scores) as temporary:
        pd.DataFrame().to_parquet(temporary)
write_text(out.status, json.dumps(record, indent=1) + "\n")
