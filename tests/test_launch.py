"""How a training run's job asks for resources and starts its processes (no scheduler needed here;
tests/test_slurm.py runs the multi-node path on a real two-node SLURM)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attngeom.errors import InputError
from attngeom.pipeline.training_runs import training_runs
from attngeom.training.launch import srun_per_node, torchrun_here, torchrun_on_slurm_node

SETTINGS = {"n_layers": 2, "hidden_size": 32, "n_heads": 2, "intermediate_size": 64, "device": "cpu"}


def run_of(**entry) -> object:
    return training_runs({"defaults": SETTINGS, "runs": [{"name": "r", **entry}]}, "results")["r"]


def test_a_run_on_one_node_asks_for_its_gpus_as_the_gpu_resource():
    run = run_of(gpus=2, mem_mb=3000, runtime=7)
    assert run.resources() == {"mem_mb": 3000, "runtime": 7, "gpu": 2}
    assert "nodes" not in run.settings and run.nodes == 1


def test_a_run_on_several_nodes_asks_for_one_task_per_node_and_gpus_per_node():
    run = run_of(gpus=4, nodes=3, mem_mb=3000, runtime=7)
    assert run.resources() == {
        "mem_mb": 3000,
        "runtime": 7,
        "nodes": 3,
        "tasks": 3,
        "mpi": "srun",
        "tasks_per_gpu": 0,  # else the SLURM plugin adds --ntasks-per-gpu=<tasks>
        "gres": "gpu:4",  # per node; --gpus would count the whole job
    }
    assert "gres" not in run_of(gpus=0, nodes=2).resources()


def test_the_launch_commands():
    assert torchrun_here(4)[-2:] == ["--standalone", "--nproc-per-node=4"]
    step = srun_per_node(["srun", "--mpi=none"], nodes=2, processes=4, threads=16, gpus=4)
    assert step == [
        *["srun", "--mpi=none", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--cpus-per-task=16"],
        *["--gres=gpu:4", sys.executable, "-m", "attngeom.training.launch", "4", "--"],
    ]
    cpu_step = srun_per_node(["srun"], nodes=2, processes=1, threads=1, gpus=0)
    assert not [arg for arg in cpu_step if arg.startswith("--gres")]


def test_outside_a_slurm_job_the_node_launcher_is_a_one_line_error():
    with pytest.raises(InputError, match="SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_NNODES not set"):
        torchrun_on_slurm_node(1, {})
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "attngeom.training.launch", "1", "--", "--out", "x"],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": ":".join(sys.path)},
    )
    assert done.returncode == 2 and done.stderr.startswith("attngeom: error: SLURM_JOB_ID")
    assert len(done.stderr.strip().splitlines()) == 1
