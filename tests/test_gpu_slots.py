"""One job per GPU on a machine with several: the local pipeline gives every GPU job GPUs of its own.

There is no GPU here, so the machine's GPUs are named by CUDA_VISIBLE_DEVICES in Snakemake's environment
(what a user does to choose them): the placement, the locks and the job records are the real ones, and
the jobs check what CUDA_VISIBLE_DEVICES they were given.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from itertools import combinations
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pipeline_support import ROOT, TINY_MODELS, write_config

from attngeom.errors import InputError
from attngeom.pipeline.gpus import (
    LOCKS_VARIABLE,
    SLOTS_VARIABLE,
    device_list,
    hold_gpus,
    job_gpus,
    machine_gpus,
    read_records,
)

WORKFLOW = ROOT / "tests" / "gpus" / "Snakefile"


def test_device_list_reads_cuda_visible_devices_as_cuda_does():
    assert device_list("0,1, 3") == ["0", "1", "3"]
    assert device_list("GPU-8e1c,MIG-2/1/0") == ["GPU-8e1c", "MIG-2/1/0"]
    assert device_list("") == [] and device_list("-1") == []
    assert device_list("2,-1,3") == ["2"]  # CUDA stops at the first invalid id


def fake_nvidia_smi(folder: Path, script: str) -> dict[str, str]:
    """An environment whose PATH has an ``nvidia-smi`` that runs ``script`` (the real one needs a GPU)."""
    folder.mkdir()
    tool = folder / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\n{script}\n")
    tool.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def test_machine_gpus_come_from_cuda_visible_devices_else_nvidia_smi(tmp_path):
    listing = fake_nvidia_smi(tmp_path / "ok", 'printf "0\\n1\\n"')
    assert machine_gpus({**listing, "CUDA_VISIBLE_DEVICES": "3,1"}) == (["3", "1"], None)
    assert machine_gpus({**listing, "CUDA_VISIBLE_DEVICES": ""}) == ([], None)
    assert machine_gpus(listing) == (["0", "1"], None)
    assert machine_gpus({"PATH": str(tmp_path / "nothing")}) == ([], None)
    gpus, warning = machine_gpus(fake_nvidia_smi(tmp_path / "broken", "echo no driver >&2; exit 9"))
    assert gpus == [] and "nvidia-smi" in warning and "CUDA_VISIBLE_DEVICES" in warning


@pytest.fixture
def log():
    with open(os.devnull, "w") as handle:
        yield handle


def test_a_gpu_is_held_by_one_holder_at_a_time(tmp_path, log):
    with hold_gpus(2, ["a", "b", "c"], tmp_path, log) as first:
        assert first == ["a", "b"]
        with hold_gpus(1, ["a", "b", "c"], tmp_path, log) as second:
            assert second == ["c"]
    with hold_gpus(3, ["a", "b", "c"], tmp_path, log) as again:  # all given back
        assert again == ["a", "b", "c"]
    with pytest.raises(InputError, match="needs 4 GPUs and the pipeline has 3"):
        with hold_gpus(4, ["a", "b", "c"], tmp_path, log):
            pass


def test_a_job_waits_for_a_gpu_another_holds_and_takes_it_once_given_back(tmp_path, log):
    """Two pipelines of one user share the machine's locks: the second job waits, holding nothing."""
    events: list[str] = []
    taken = threading.Event()

    def second_job():
        with hold_gpus(1, ["0"], tmp_path, log):
            events.append("second holds 0")
            taken.set()

    with hold_gpus(1, ["0"], tmp_path, log):
        waiter = threading.Thread(target=second_job)
        waiter.start()
        assert not taken.wait(1.5), "a second holder took a held GPU"
        events.append("first gives 0 back")
    waiter.join(timeout=60)
    assert events == ["first gives 0 back", "second holds 0"]


def test_a_killed_job_gives_its_gpu_back(tmp_path, log):
    """The lock is the kernel's: a job killed with SIGKILL cannot leave its GPU taken."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from attngeom.pipeline.gpus import hold_gpus\n"
            f"with hold_gpus(1, ['0'], __import__('pathlib').Path({str(tmp_path)!r}), sys.stdout):\n"
            "    print('held', flush=True); time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    done = threading.Event()

    def take():
        with hold_gpus(1, ["0"], tmp_path, log):
            done.set()

    threading.Thread(target=take, daemon=True).start()
    assert not done.wait(1.0)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert done.wait(30), "the GPU of a killed job stayed taken"


def test_outside_a_local_pipeline_a_job_changes_nothing(log):
    environ = {"CUDA_VISIBLE_DEVICES": "5"}
    with job_gpus(1, log, environ) as held:
        assert held is None and environ == {"CUDA_VISIBLE_DEVICES": "5"}


def test_a_cpu_job_of_a_local_pipeline_sees_no_gpu(tmp_path):
    environ = {SLOTS_VARIABLE: "0,1", LOCKS_VARIABLE: str(tmp_path)}
    log = tmp_path / "job.log"
    with log.open("w") as handle, job_gpus(0, handle, environ) as held:
        assert held == [] and environ["CUDA_VISIBLE_DEVICES"] == ""
    (record,) = read_records(log.read_text())
    assert record["gpus"] == [] and record["end"] >= record["start"]


def run_workflow(
    snakefile: Path, workdir: Path, gpus: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess:
    """Snakemake through profiles/local, as a user runs it, with ``gpus`` as the machine's GPUs and its own
    temporary folder (so its GPU locks are not those of another test running on this machine)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpus, TMPDIR=str(workdir), OMP_NUM_THREADS="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", str(workdir)]
    command += ["--profile", str(ROOT / "profiles" / "local"), *args]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0 or not check, result.stderr[-4000:]
    return result


def holds(logs: list[Path]) -> pd.DataFrame:
    """One row per job: its GPUs, when it held them, and its name."""
    rows = []
    for log in logs:
        (record,) = read_records(log.read_text())
        assert record["end"] is not None, log
        rows.append({**record, "job": str(log)})
    return pd.DataFrame(rows)


def overlapping(frame: pd.DataFrame) -> list[tuple[pd.Series, pd.Series]]:
    rows = [row for _, row in frame.iterrows()]
    return [(a, b) for a, b in combinations(rows, 2) if a["start"] < b["end"] and b["start"] < a["end"]]


def peak_gpus(frame: pd.DataFrame) -> int:
    """Most GPUs held at one moment: at every start, the GPUs of the jobs running then."""
    return max(
        sum(
            len(other["gpus"])
            for _, other in frame.iterrows()
            if other["start"] <= row["start"] < other["end"]
        )
        for _, row in frame.iterrows()
    )


def test_the_local_profile_runs_one_job_per_gpu_at_once_each_on_its_own(tmp_path):
    run = run_workflow(WORKFLOW, tmp_path, "0,1,2,3", "--cores", "8")
    assert re.search(r"^Provided resources: .*gpu\D*4\b", run.stderr, re.M)  # the number of GPUs found
    frame = holds(sorted((tmp_path / "logs").rglob("*.log")))
    frame["kind"] = frame["job"].map(lambda job: Path(job).parent.name)
    needed = {"none": 0, "one": 1, "two": 2}
    assert (frame["gpus"].map(len) == frame["kind"].map(needed)).all()
    assert set().union(*frame["gpus"]) == {"0", "1", "2", "3"}  # every GPU used
    for a, b in overlapping(frame):
        assert not set(a["gpus"]) & set(b["gpus"]), f"{a['job']} and {b['job']} shared a GPU"
    assert peak_gpus(frame) == 4  # all GPUs busy at once, never more
    for output in tmp_path.glob("*/*.json"):  # what CUDA saw in each job: exactly its own GPUs
        job = json.loads(output.read_text())
        assert job["seen"] == ",".join(job["held"])


def test_resources_gpu_limits_the_jobs_and_cuda_visible_devices_picks_the_gpus(tmp_path):
    targets = [f"one/{i}.json" for i in range(4)]
    run = run_workflow(WORKFLOW, tmp_path, "3,1", *targets, "--cores", "8", "--resources", "gpu=1")
    assert re.search(r"^Provided resources: .*gpu\D*1\b", run.stderr, re.M)  # the user's limit
    frame = holds(sorted((tmp_path / "logs").rglob("*.log")))
    assert len(frame) == 4 and set().union(*frame["gpus"]) <= {"3", "1"}
    assert overlapping(frame) == [], "two GPU jobs ran at once under --resources gpu=1"


TRAIN = {
    **dict(n_layers=2, hidden_size=32, n_heads=2, intermediate_size=64, seq_len=32, batch_size=4),
    **dict(grad_accum=1, steps=30, warmup_steps=3, lr=1e-3, log_every=5, checkpoint_every=10),
    **dict(score_every=30, vocab_size=300, max_documents=20, device="cpu", threads=1),
}


@pytest.mark.slow  # three training runs at once through the pipeline, one of them two DDP processes
def test_the_train_rule_pins_each_run_and_gives_a_ddp_run_two_gpus(tmp_path):
    """The pipeline's own train rule on four GPUs: two one-GPU runs and a two-GPU run (torchrun, two
    processes; gloo on the CPU here) train at once, on GPUs of their own."""
    config = write_config(tmp_path / "config.yaml", TINY_MODELS)
    data = yaml.safe_load(config.read_text())
    data["training"] = {
        "defaults": TRAIN,
        "runs": [
            {"name": "a", "gpus": 1},
            {"name": "b", "gpus": 1, "init": "symmetric"},
            {"name": "ddp", "gpus": 2},
        ],
    }
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    targets = [f"results/training/{run}/final" for run in ("a", "b", "ddp")]
    run_workflow(
        ROOT / "workflow" / "Snakefile",
        tmp_path,
        "0,1,2,3",
        "--cores",
        "4",
        *targets,
        "--configfile",
        str(config),
    )
    logs = {
        run: tmp_path / "results" / "training" / "logs" / "train" / f"{run}.log" for run in ("a", "b", "ddp")
    }
    frame = holds(list(logs.values()))
    assert frame["gpus"].map(len).tolist() == [1, 1, 2]
    assert sorted(sum(frame["gpus"], [])) == ["0", "1", "2", "3"]  # four GPUs, none shared
    assert len(overlapping(frame)) == 3, "the three runs did not train at once"
    assert "torch.distributed.run --standalone --nproc-per-node=2" in logs["ddp"].read_text()
    losses = pd.read_parquet(tmp_path / "results" / "training" / "ddp" / "loss.parquet")
    assert losses["step"].max() == TRAIN["steps"] and losses["loss"].notna().all()


def test_a_run_on_several_nodes_stops_with_one_line_locally(tmp_path):
    config = write_config(tmp_path / "config.yaml", TINY_MODELS)
    data = yaml.safe_load(config.read_text())
    data["training"] = {"defaults": TRAIN, "runs": [{"name": "multi", "nodes": 2}]}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    target = "results/training/multi/final"
    run = run_workflow(
        ROOT / "workflow" / "Snakefile", tmp_path, "0", target, "--configfile", str(config), check=False
    )
    assert run.returncode != 0
    log = (tmp_path / "results" / "training" / "logs" / "train" / "multi.log").read_text()
    (error,) = [line for line in log.splitlines() if line.startswith("attngeom: error:")]
    assert "training run multi asks for 2 nodes: run it through SLURM" in error
    assert not (tmp_path / "results" / "training" / "multi").exists()
