"""How ``attngeom train`` starts on several processes: torchrun on one machine, or one torchrun per node
of a SLURM job, the launchers meeting at the job's first node (torchrun's c10d rendezvous).

On several nodes the job runs ``srun`` with one task per node (``srun_per_node``); each task runs this
module, which reads its node's SLURM environment and becomes torchrun::

    srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ... python -m attngeom.training.launch 4 -- --out DIR ...
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence

from ..errors import InputError

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
"""torchrun, from this interpreter (no PATH lookup)."""
RENDEZVOUS_PORT = 29400
"""Base of the rendezvous port; each job adds its id modulo 1000, so two jobs that share a first node
do not meet at the same port."""


def torchrun_here(processes: int) -> list[str]:
    """``processes`` workers on this machine (a free port of its own)."""
    return [*TORCHRUN, "--standalone", f"--nproc-per-node={processes}"]


def torchrun_on_slurm_node(processes: int, environ: Mapping[str, str]) -> list[str]:
    """``processes`` workers on this node of a SLURM job step with one task per node: ``--nnodes`` from
    ``SLURM_NNODES``, the rendezvous at the first host of ``SLURM_JOB_NODELIST`` (expanded by
    ``scontrol show hostnames``), its port and id from ``SLURM_JOB_ID``."""
    missing = [k for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NNODES") if not environ.get(k)]
    if missing:
        raise InputError(
            f"{', '.join(missing)} not set: a training run on several nodes must run inside a SLURM job "
            "(snakemake --profile profiles/slurm), one srun task per node"
        )
    hosts = subprocess.run(
        ["scontrol", "show", "hostnames", environ["SLURM_JOB_NODELIST"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    job = environ["SLURM_JOB_ID"]
    return [
        *TORCHRUN,
        f"--nnodes={environ['SLURM_NNODES']}",
        f"--nproc-per-node={processes}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={hosts[0]}:{RENDEZVOUS_PORT + int(job) % 1000}",
        f"--rdzv-id={job}",
    ]


def srun_per_node(srun: Sequence[str], nodes: int, processes: int, threads: int, gpus: int) -> list[str]:
    """The job step that starts one launcher (this module) per node; ``srun`` is the rule's ``mpi``
    resource. CPUs and GPUs per task are given explicitly: srun inherits neither from sbatch."""
    return [
        *srun,
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={threads}",
        *([f"--gres=gpu:{gpus}"] if gpus else []),
        sys.executable,
        "-m",
        "attngeom.training.launch",
        str(processes),
        "--",
    ]


def main(argv: Sequence[str]) -> None:
    """``python -m attngeom.training.launch PROCESSES -- TRAIN-ARGUMENTS``: become this node's torchrun."""
    processes, separator, *train = argv
    if separator != "--":
        raise SystemExit("usage: python -m attngeom.training.launch PROCESSES -- TRAIN-ARGUMENTS")
    try:
        torchrun = torchrun_on_slurm_node(int(processes), os.environ)
    except InputError as err:
        print(f"attngeom: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    command = [*torchrun, "-m", "attngeom.cli", "train", *train]
    node, task, tasks = (os.environ.get(k, "?") for k in ("SLURMD_NODENAME", "SLURM_PROCID", "SLURM_NTASKS"))
    print(f"node {node}, task {task} of {tasks}: {shlex.join(command)}", flush=True)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
