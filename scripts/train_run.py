"""Rule train: train (or resume) one run; a run whose settings changed since its folder was written is
trained again from scratch (the old run moved aside).

One process per GPU through torchrun when the run has several; on several SLURM nodes, one torchrun per
node, started with srun (attngeom.training.launch). Run locally, the job first takes GPUs of its own
(attngeom.pipeline.gpus) so that no other job shares them (or, for a run with runs_per_gpu, slots of
one GPU); torch is imported only then, because CUDA reads CUDA_VISIBLE_DEVICES once, when it starts.
A shared run with `mps: true` then makes sure an NVIDIA MPS daemon serves its GPU (attngeom.pipeline.mps)
and trains in a child process, so that no CUDA client of this job is left when the last job sharing the
GPU quits the daemon. Everything the job and its processes print goes to the rule's log
(attngeom.pipeline.job_log), a traceback too.
"""

from attngeom.pipeline.job_log import to_rule_log

to_rule_log(snakemake.log[0])

import contextlib
import os
import shlex
import subprocess
import sys

from attngeom import interrupts
from attngeom.errors import InputError
from attngeom.pipeline.gpus import job_gpus
from attngeom.pipeline.mps import MODE, mps_share
from attngeom.training.launch import srun_per_node, torchrun_here

interrupts.install()  # SIGTERM (a cancelled job): one line, no half-written checkpoint

run = snakemake.wildcards.run
settings = snakemake.params.settings
out = snakemake.params.out
gpus = int(snakemake.params.gpus)  # per node
nodes = int(snakemake.resources.get("nodes", 1))
processes = max(1, gpus)  # per node: one per GPU, else one CPU process
threads = snakemake.threads
train_args = ["--out", out, "--log-lines", *(f"{k}={v}" for k, v in settings.items())]


def refuse(message: str) -> None:
    print(f"attngeom: error: training run {run} {message}", file=sys.stderr)
    raise SystemExit(2)


log = sys.stdout  # the rule's log
with contextlib.ExitStack() as stack:
    try:
        held = stack.enter_context(
            job_gpus(
                int(snakemake.resources.get("gpu", 0)),
                log,
                slots=int(snakemake.resources.get("gpu_slots", 0)),
            )
        )
    except InputError as err:  # the GPU locks cannot be taken: one line, not a traceback
        refuse(f"cannot take its GPUs: {err}")
    print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)  # what CUDA sees
    if snakemake.params.shared and not snakemake.params.mps:
        print(f"{MODE}time-sliced (mps: false)", flush=True)
    mode = stack.enter_context(mps_share(log)) if snakemake.params.mps else None
    if held is not None and nodes > 1:
        refuse(f"asks for {nodes} nodes: run it through SLURM (snakemake --profile profiles/slurm)")
    if held is not None and len(held) < gpus:
        refuse(
            f"asks for gpus: {gpus} and this machine offers {len(held)} (CUDA_VISIBLE_DEVICES, nvidia-smi, "
            "--resources gpu): lower its gpus, or run it where there are more"
        )
    if nodes > 1:
        command = [*srun_per_node(shlex.split(snakemake.resources.mpi), nodes, processes, threads, gpus)]
    elif processes > 1:
        command = [*torchrun_here(processes), "-m", "attngeom.cli", "train"]
    elif mode == "mps":
        command = [sys.executable, "-m", "attngeom.cli", "train", "--restart-if-changed"]
    else:
        command = None
    if command:
        print(shlex.join(command + train_args), flush=True)
        threads_each = str(max(1, threads // processes))
        env = dict(os.environ, OMP_NUM_THREADS=threads_each)
        subprocess.run(command + train_args, check=True, env=env)  # its output: this job's, the log
    else:
        import torch

        from attngeom.training.config import make_config
        from attngeom.training.loop import train

        torch.set_num_threads(max(1, threads))
        train(make_config(settings), out, progress="lines", restart="if-changed")
    print(f"run folder: {out}")
