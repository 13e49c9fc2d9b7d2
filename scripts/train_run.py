"""Snakemake script: train (or resume) one run of `training: runs:`, on torchrun when it has several GPUs."""

import contextlib
import os
import subprocess
import sys

import torch

from attngeom.training.config import make_config
from attngeom.training.loop import train


def main(snakemake) -> None:
    settings = snakemake.params.settings
    out = snakemake.params.out
    gpus = int(snakemake.params.gpus)
    with open(snakemake.log[0], "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        if gpus > 1:  # one process per GPU; rank 0 writes the run folder
            args = [f"{k}={v}" for k, v in settings.items()]
            command = ["torchrun", "--standalone", f"--nproc_per_node={gpus}", "-m", "attngeom.cli", "train"]
            subprocess.run(
                [*command, "--out", out, "--quiet", *args],
                check=True,
                stdout=log,
                stderr=log,
                env=dict(os.environ, OMP_NUM_THREADS=str(max(1, snakemake.threads // gpus))),
            )
            return
        torch.set_num_threads(max(1, snakemake.threads))
        train(make_config(settings), out, progress=False)
        print(f"run folder: {out}")


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake
    sys.exit(0)
