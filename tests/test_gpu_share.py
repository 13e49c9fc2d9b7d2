"""Several training runs on one GPU (`runs_per_gpu: K`): the local profile's GPU slots, the SLURM
profile's job groups, and the one-line errors.

There is no GPU here: the machine's GPUs are named by CUDA_VISIBLE_DEVICES (what a user does to choose
them), so the slot locks, the placement and the job records are the real ones. The SLURM side is a dry
run through profiles/slurm (tests/test_slurm.py runs that profile on a real cluster).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from pipeline_support import ROOT, TINY_MODELS, write_config
from snakemake.resources import GroupResources, Resources
from test_gpu_slots import WORKFLOW, holds, run_workflow

from attngeom.errors import InputError
from attngeom.pipeline.gpus import hold_gpus, hold_share
from attngeom.pipeline.training_runs import share_problem, slots_per_gpu, training_runs

SETTINGS = {"n_layers": 2, "hidden_size": 32, "n_heads": 2, "intermediate_size": 64, "device": "cpu"}


def runs_of(*entries: dict, **defaults) -> dict:
    return training_runs({"defaults": {**SETTINGS, **defaults}, "runs": list(entries)}, "results")


@pytest.fixture
def log():
    with open(os.devnull, "w") as handle:
        yield handle


# ---------------------------------------------------------------- the setting


def test_a_shared_run_asks_for_slots_locally_and_for_one_gpu_string_under_slurm():
    runs = runs_of({"name": "shared", "runs_per_gpu": 2}, {"name": "alone"}, gpus=1, mem_mb=3000, runtime=60)
    assert slots_per_gpu(runs) == 2
    shared, alone = runs["shared"], runs["alone"]
    assert "runs_per_gpu" not in shared.settings  # a scheduler setting, not a training one
    assert shared.threads == 4 and alone.threads == 8  # a GPU's 8 CPUs, split between its runs
    # locally: half a GPU's slots and no whole GPU; a whole-GPU job counts all its GPU's slots
    assert shared.resources(2, here=True) == {"mem_mb": 3000, "runtime": 120, "gpu": 0, "gpu_slots": 1}
    assert alone.resources(2, here=True) == {"mem_mb": 3000, "runtime": 60, "gpu": 1, "gpu_slots": 2}
    # SLURM: a string Snakemake keeps (not adds up) over a group's jobs; no slots
    assert shared.resources(2, here=False) == {"mem_mb": 3000, "runtime": 120, "gres": "gpu:1"}
    assert alone.resources(2, here=False) == {"mem_mb": 3000, "runtime": 60, "gpu": 1}
    # no run shares: nothing changes
    assert runs_of({"name": "r"}, gpus=1, mem_mb=3000, runtime=60)["r"].resources() == {
        "mem_mb": 3000,
        "runtime": 60,
        "gpu": 1,
    }


def test_slots_per_gpu_is_the_least_common_multiple_of_the_runs_shares():
    runs = runs_of(*({"name": f"k{k}", "runs_per_gpu": k} for k in (1, 2, 4, 3)), gpus=1)
    assert slots_per_gpu(runs) == 12
    assert runs["k4"].resources(12)["gpu_slots"] == 3 and runs["k1"].resources(12)["gpu_slots"] == 12


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"runs_per_gpu": 0}, "runs_per_gpu must be a whole number from 1 to 64, not 0"),
        ({"runs_per_gpu": "two"}, "runs_per_gpu must be a whole number from 1 to 64, not 'two'"),
        (
            {"runs_per_gpu": 2, "gpus": 2},
            "sets runs_per_gpu: 2 with gpus: 2 and nodes: 1; only runs of one GPU",
        ),
        ({"runs_per_gpu": 2, "gpus": 1, "nodes": 2}, "with gpus: 1 and nodes: 2; only runs of one GPU"),
        ({"runs_per_gpu": 2, "gpus": 0}, "with gpus: 0 and nodes: 1"),
    ],
)
def test_a_bad_runs_per_gpu_is_one_line(entry, message):
    with pytest.raises(InputError) as err:
        runs_of({"name": "r", **entry})
    assert str(err.value).startswith("config: training run 'r'") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_shares_that_would_cut_a_gpu_too_fine_are_one_line():
    runs = runs_of(*({"name": f"k{k}", "runs_per_gpu": k} for k in (5, 7, 8)), gpus=1)
    with pytest.raises(
        InputError,
        match=r"^config: training runs set runs_per_gpu 5, 7, 8: a GPU would be cut into 280 slots",
    ):
        slots_per_gpu(runs)


def test_share_problem_names_what_the_profile_lacks():
    runs = runs_of({"name": "r", "runs_per_gpu": 2, "threads": 3}, gpus=1)
    assert share_problem(runs, {"gpu_share_2": 2}, 8) is None
    assert share_problem(runs, {"gpu_share_2": 2}, None) is None
    assert "add gpu_share_2=2 to group-components" in share_problem(runs, {}, 8)
    assert "group-components give gpu_share_2 4" in share_problem(runs, {"gpu_share_2": 4}, 8)
    assert "lower threads to 2 or raise cores" in share_problem(runs, {"gpu_share_2": 2}, 5)
    assert share_problem(runs_of({"name": "alone"}, gpus=1), {}, 1) is None


# ---------------------------------------------------------------- the slot locks


def in_background(hold) -> tuple[threading.Thread, threading.Event]:
    """``hold()`` (a context manager) entered in a thread; the event is set once it holds."""
    held = threading.Event()

    def take():
        with hold():
            held.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread, held


def test_shares_spread_over_the_gpus_then_fill_them_and_keep_whole_gpu_jobs_out(tmp_path, log):
    gpus = ["a", "b"]

    def share():
        return hold_share(1, 2, gpus, tmp_path, log)

    with share() as first, share() as second:
        assert (first, second) == (["a"], ["b"])  # the GPU with the most free slots first
        with share() as third, share() as fourth:
            assert sorted(third + fourth) == ["a", "b"]  # two on each GPU now
            thread, fifth = in_background(share)
            assert not fifth.wait(1.5), "a third job took a slot of a GPU two jobs share"
        thread.join(timeout=60)
        assert fifth.is_set()  # once a slot was given back
        thread, whole = in_background(lambda: hold_gpus(1, gpus, tmp_path, log))
        assert not whole.wait(1.5), "a whole-GPU job took a GPU that shared jobs hold"
    thread.join(timeout=60)
    assert whole.is_set()
    with hold_gpus(2, gpus, tmp_path, log):
        thread, shared = in_background(share)
        assert not shared.wait(1.5), "a share of a GPU held whole was given"
    thread.join(timeout=60)
    assert shared.is_set()


def test_a_share_of_two_slots_of_four_takes_half_a_gpu(tmp_path, log):
    def hold(slots):
        return hold_share(slots, 4, ["g"], tmp_path, log)

    with hold(2), hold(1) as quarter:
        assert quarter == ["g"]
        thread, half = in_background(lambda: hold(2))
        assert not half.wait(1.0), "more than the GPU's four slots were held"
    thread.join(timeout=60)
    assert half.is_set()
    with pytest.raises(InputError, match="needs a share of a GPU and the pipeline has none"):
        with hold_share(1, 2, [], tmp_path, log):
            pass


# ---------------------------------------------------------------- the local profile


def per_gpu_peak(frame: pd.DataFrame) -> dict[str, int]:
    """Most jobs holding each GPU at one moment (at every start, the jobs running then)."""
    peak: dict[str, int] = {}
    for _, row in frame.iterrows():
        at_once = frame[(frame["start"] <= row["start"]) & (row["start"] < frame["end"])]
        for gpu in row["gpus"]:
            peak[gpu] = max(peak.get(gpu, 0), int(at_once["gpus"].map(lambda g, gpu=gpu: gpu in g).sum()))
    return peak


def share_config(path: Path, jobs: dict[str, int]) -> Path:
    """A config of the test workflow: a training run "share" with runs_per_gpu 2, and job counts; each job
    holds its GPU 5 s, longer than Snakemake takes to start the next ones on a busy 2-core machine."""
    training = {"defaults": SETTINGS, "runs": [{"name": "share", "gpus": 1, "runs_per_gpu": 2}]}
    path.write_text(yaml.safe_dump({"training": training, "jobs": jobs, "seconds": 5}))
    return path


@pytest.mark.slow
def test_the_local_profile_puts_two_shared_jobs_on_each_gpu_and_never_three(tmp_path):
    """Six jobs of a run with runs_per_gpu 2 on two GPUs: Snakemake's slots let four run at once, both GPUs
    in use, two jobs at once on one GPU and never three (how many overlap on each GPU depends on when
    Snakemake starts them); a whole-GPU job never shares."""
    config = share_config(tmp_path / "c.yaml", {"share": 6, "one": 2})
    run = run_workflow(WORKFLOW, tmp_path, "0,1", "--cores", "8", "--configfile", str(config))
    assert re.search(r"^Provided resources: .*gpu_slots\D*4\b", run.stderr, re.M)  # 2 GPUs × 2 slots
    frame = holds(sorted((tmp_path / "logs").rglob("*.log")))
    frame["kind"] = frame["job"].map(lambda job: Path(job).parent.name)
    shared = frame[frame["kind"] == "share"]
    assert (shared["gpus"].map(len) == 1).all() and (shared["slots"] == "1 of 2").all()
    peaks = per_gpu_peak(shared)  # the same GPU handed to two jobs at once, never three
    assert set(peaks) == {"0", "1"} and max(peaks.values()) == 2
    for _, whole in frame[frame["kind"] == "one"].iterrows():
        (gpu,) = whole["gpus"]
        during = frame[(frame["start"] < whole["end"]) & (whole["start"] < frame["end"])]
        assert during["gpus"].map(lambda g, gpu=gpu: gpu in g).sum() == 1, "a whole-GPU job shared its GPU"
    for output in tmp_path.glob("share/*.json"):
        assert yaml.safe_load(output.read_text())["seen"] in ("0", "1")  # CUDA sees its one GPU


# ---------------------------------------------------------------- the pipeline, dry


TRAIN = {**SETTINGS, "steps": 10}
TINY_TRAIN = {"seq_len": 32, "batch_size": 4, "grad_accum": 1, "warmup_steps": 1, "lr": 1e-3, "threads": 1}
TINY_TRAIN |= {"vocab_size": 300, "max_documents": 20}


def pipeline_config(tmp_path: Path, **defaults) -> Path:
    config = write_config(tmp_path / "config.yaml", TINY_MODELS)
    data = yaml.safe_load(config.read_text())
    training = {"defaults": {**TRAIN, "gpus": 1, "mem_mb": 3000, "runtime": 30, **defaults}}
    data["training"] = {**training, "runs": [{"name": name} for name in ("a", "b", "c")]}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config


def dry_run(tmp_path: Path, profile: str, config: Path, *args: str) -> subprocess.CompletedProcess:
    targets = [f"results/training/{run}/final" for run in ("a", "b", "c")]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="0,1", TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile")]
    command += ["--directory", str(tmp_path), "--profile", str(ROOT / "profiles" / profile), "-n"]
    command += [*targets, *args, "--configfile", str(config)]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def group_jobs(output: str) -> list[list[dict]]:
    """The train jobs of each group job a dry run prints: run, threads and resources of each."""
    groups: list[list[dict]] = []
    for line in output.splitlines():
        if re.search(r"\] Group job (\S+) ", line):
            groups.append([])
        elif re.match(r"^ {4}rule train:$", line) and groups:
            groups[-1].append({"threads": 1})
        elif (
            groups and groups[-1] and (match := re.match(r"^ {8}(threads|wildcards|resources): (.*)$", line))
        ):
            if match[1] == "threads":
                groups[-1][-1]["threads"] = int(match[2])
            elif match[1] == "wildcards":
                groups[-1][-1]["run"] = match[2].removeprefix("run=")
            else:
                pairs = (item.split("=", 1) for item in match[2].split(", "))
                groups[-1][-1]["resources"] = {k: int(v) if v.isdigit() else v for k, v in pairs}
    return groups


@pytest.mark.slow
def test_the_local_profile_counts_a_shared_train_job_as_a_slot_not_a_gpu(tmp_path):
    result = dry_run(tmp_path, "local", pipeline_config(tmp_path, runs_per_gpu=2))
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = [job for group in group_jobs(result.stdout) for job in group]
    assert len(jobs) == 3
    for job in jobs:
        assert job["resources"]["gpu"] == 0 and job["resources"]["gpu_slots"] == 1
        assert job["resources"]["runtime"] == 60  # twice the run's: it shares the GPU


@pytest.mark.slow
def test_the_slurm_profile_puts_two_shared_train_jobs_in_one_sbatch_job_with_one_gpu(tmp_path):
    config = pipeline_config(tmp_path, runs_per_gpu=2, threads=3)
    result = dry_run(tmp_path, "slurm", config)
    assert result.returncode == 0, result.stderr[-3000:]
    groups = group_jobs(result.stdout)
    assert sorted(len(group) for group in groups) == [1, 2]  # three runs: a pair and one alone
    (pair,) = [group for group in groups if len(group) == 2]
    # The dry run prints a string resource like a number: the jobs' resources as the rule declares them
    # (what the dry run printed), then Snakemake's own sum over a group's jobs, as it submits the group.
    runs = training_runs(yaml.safe_load(config.read_text())["training"], "results/training")
    declared = [runs[job["run"]].resources(slots_per_gpu(runs), here=False) for job in pair]
    for job, resources in zip(pair, declared, strict=True):
        assert {k: str(job["resources"][k]) for k in resources} == {k: str(v) for k, v in resources.items()}
    assert declared[0]["gres"] == "gpu:1" and declared[0]["runtime"] == 60  # twice the run's: it shares
    members = [
        SimpleNamespace(resources={**resources, "_cores": job["threads"]}, pipe_group=None)
        for job, resources in zip(pair, declared, strict=True)
    ]
    constraints = Resources.from_mapping({"_cores": 8, "_nodes": 100})  # the profile's cores: 8
    group = GroupResources.basic_layered([members], constraints, run_local=False)
    assert group["gres"] == "gpu:1" and "gpu" not in group  # one GPU for the pair, which both see
    assert group["mem_mb"] == 6000 and group["_cores"] == 6  # side by side: memory and CPUs add up
    assert group["runtime"] == 60  # one layer: the longer job's time, not the sum


@pytest.mark.slow
def test_the_slurm_profile_stops_with_one_line_when_shared_jobs_would_go_alone(tmp_path):
    """Without group-components gpu_share_2=2 each shared job would be an sbatch job of its own asking
    for a GPU of its own (too many threads for the profile's cores: share_problem, above)."""
    config = pipeline_config(tmp_path, runs_per_gpu=2)
    result = dry_run(tmp_path, "slurm", config, "--group-components", "score=50")
    assert result.returncode == 2, result.stderr[-3000:]
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("attngeom: error:")]
    assert re.search(r"training run '[abc]' sets runs_per_gpu: 2 and the profile's group-components", error)
    assert "add gpu_share_2=2 to group-components" in error and "Traceback" not in result.stderr


@pytest.mark.slow
def test_two_runs_of_the_train_rule_share_one_gpu(tmp_path):
    """The pipeline's own train rule (scripts/train_run.py) on one GPU: two runs with runs_per_gpu 2
    train at once, both on it, each holding one of its two slots."""
    config = pipeline_config(
        tmp_path, runs_per_gpu=2, steps=4, log_every=2, checkpoint_every=4, score_every=4
    )
    data = yaml.safe_load(config.read_text())
    data["training"]["defaults"].update(TINY_TRAIN)
    data["training"]["runs"] = [{"name": "a"}, {"name": "b"}]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    targets = [f"results/training/{run}/final" for run in ("a", "b")]
    run_workflow(
        ROOT / "workflow" / "Snakefile", tmp_path, "0", "--cores", "2", *targets, "--configfile", str(config)
    )
    logs = [tmp_path / "results" / "training" / "logs" / "train" / f"{run}.log" for run in ("a", "b")]
    frame = holds(logs)
    assert frame["gpus"].tolist() == [["0"], ["0"]] and (frame["slots"] == "1 of 2").all()
    assert per_gpu_peak(frame) == {"0": 2}, "the two runs did not share the GPU at once"
    for log in logs:  # mps: false, the default: the mode beside the GPU, and no daemon
        assert "CUDA_VISIBLE_DEVICES=0\nGPU sharing: time-sliced (mps: false)\n" in log.read_text()
    for run in ("a", "b"):
        losses = pd.read_parquet(tmp_path / "results" / "training" / run / "loss.parquet")
        assert losses["step"].max() == 4 and losses["loss"].notna().all()
