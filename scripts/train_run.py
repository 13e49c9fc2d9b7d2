"""Rule train: train (or resume) one run, on torchrun when it has several GPUs; a run whose settings
changed since its folder was written is trained again from scratch (the old run moved aside)."""

import contextlib
import os
import subprocess

import torch

from attngeom.training.config import make_config
from attngeom.training.loop import train

settings = snakemake.params.settings
out = snakemake.params.out
gpus = int(snakemake.params.gpus)
threads = snakemake.threads
with open(snakemake.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
    if gpus > 1:  # one process per GPU; rank 0 writes the run folder
        command = ["torchrun", "--standalone", f"--nproc_per_node={gpus}", "-m", "attngeom.cli", "train"]
        subprocess.run(
            [*command, "--out", out, "--quiet", *(f"{k}={v}" for k, v in settings.items())],
            check=True,
            stdout=log,
            stderr=log,
            env=dict(os.environ, OMP_NUM_THREADS=str(max(1, threads // gpus))),
        )
    else:
        torch.set_num_threads(max(1, threads))
        train(make_config(settings), out, progress=False, restart="if-changed")
    print(f"run folder: {out}")
