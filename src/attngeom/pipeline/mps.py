"""NVIDIA MPS for training runs that share a GPU (``runs_per_gpu`` with ``mps: true``).

Processes that share a GPU take turns on it (time-slicing); under MPS one server runs the kernels of all
of them, so they overlap: four BERT-mini runs on an H100 train 4.36M tokens/s together under MPS against
3.70M time-sliced (benchmarks/README.md; for two runs the machines measured disagree). Nothing starts a
daemon by itself, so each shared train job makes sure one serves its GPU before anything in it
initialises CUDA (``mps_share``): one control daemon per user and GPU, its pipe and log folders in a
folder of that GPU (``mps_folder``), started by the first job and quit by the last. A lock serialises
the starting and stopping; every job holds a second lock file shared while it uses the daemon, so the
job that can take it exclusively on leaving is the last one. A daemon the user runs
(``CUDA_MPS_PIPE_DIRECTORY`` set) is used and never stopped. No GPU setting (compute mode) is changed:
MPS clients and other processes share a GPU in its default mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

from .gpus import device_list, lock_folder, own_folder, try_lock

CONTROL = "nvidia-cuda-mps-control"
PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
LOG_VARIABLE = "CUDA_MPS_LOG_DIRECTORY"
MODE = "GPU sharing: "
"""Prefix of the line a shared train job logs: ``mps`` or ``time-sliced``, and why."""
START_SECONDS = 30.0
"""How long a started daemon has to answer on its control socket."""
PIPE_PATH_LIMIT = 80
"""The longest pipe folder: the daemon's Unix sockets lie in it, and a socket's path has at most 107 bytes
(``sun_path``), so this leaves room for their names."""


def mps_folder(gpu: str, environ: dict[str, str] = os.environ) -> Path:
    """The folder of the daemon that serves ``gpu``: per user (beside the GPU lock files), and under
    SLURM per job too, because in every job the GPUs it was given may be numbered from 0 again."""
    job = environ.get("SLURM_JOB_ID")
    return lock_folder() / (f"mps-{quote(gpu, safe='')}" + (f"-job{quote(job, safe='')}" if job else ""))


def answers(pipe: Path) -> bool:
    """Whether a control daemon listens in ``pipe`` (its socket ``control`` takes a connection). A
    ``control`` left behind by a daemon that was killed takes none. It is a sequenced-packet socket (a
    stream probe is refused as the wrong type: seen on an H100, driver 580.159.04)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
        probe.settimeout(5)
        try:
            probe.connect(str(pipe / "control"))
        except OSError:
            return False
    return True


def _control(environ: dict[str, str], pipe: Path, logs: Path) -> dict[str, str]:
    return {**environ, PIPE_VARIABLE: str(pipe), LOG_VARIABLE: str(logs)}


def _start(executable: str, environ: dict[str, str], pipe: Path, logs: Path) -> str | None:
    """Start a control daemon serving the one GPU of ``environ``'s ``CUDA_VISIBLE_DEVICES``; why not, or
    None once it answers."""
    pipe.mkdir(mode=0o700, exist_ok=True)
    logs.mkdir(mode=0o700, exist_ok=True)
    (pipe / "control").unlink(missing_ok=True)  # a killed daemon's socket (``answers`` said so)
    output = logs / "start.out"
    with open(output, "w") as out:  # a file, not a pipe: the daemon keeps what it inherits open
        try:
            done = subprocess.run(
                [executable, "-d"],
                env=_control(environ, pipe, logs),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError) as err:
            return f"{executable} -d failed ({err})"
    if done.returncode != 0:
        said = output.read_text().strip().splitlines()
        return f"{executable} -d failed (exit code {done.returncode}{': ' + said[-1] if said else ''})"
    deadline = time.monotonic() + START_SECONDS
    while not answers(pipe):
        if time.monotonic() > deadline:
            _quit(executable, environ, pipe, logs)  # in case it runs and only its socket is not found
            return f"{executable} -d started no daemon answering in {pipe} (see {logs}/control.log)"
        time.sleep(0.1)
    return None


def _quit(executable: str, environ: dict[str, str], pipe: Path, logs: Path) -> str | None:
    """``echo quit | nvidia-cuda-mps-control`` for the daemon in ``pipe``; why it failed, or None once
    the daemon is gone."""
    try:
        subprocess.run(
            [executable],
            input="quit\n",
            env=_control(environ, pipe, logs),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"quitting the MPS control daemon in {pipe} failed ({err})"
    deadline = time.monotonic() + START_SECONDS
    while answers(pipe):
        if time.monotonic() > deadline:
            return f"the MPS control daemon in {pipe} still answers after quit"
        time.sleep(0.1)
    return None


def _warn(log: TextIO, message: str) -> None:
    print(f"attngeom: warning: {message}", file=log, flush=True)


def _time_sliced(log: TextIO, problem: str) -> str:
    """The one warning line, and the mode a job without MPS runs in."""
    _warn(log, f"{problem}: the run shares its GPU time-sliced, not under MPS")
    print(f"{MODE}time-sliced", file=log, flush=True)
    return "time-sliced"


@contextlib.contextmanager
def mps_share(log: TextIO, environ: dict[str, str] = os.environ) -> Iterator[str]:
    """A train job that shares its GPU, served by an MPS control daemon for the duration of the block
    where one can be had: ``environ`` (what the job's CUDA process inherits) points at it, and its GPU
    is device 0, as the daemon numbers the GPUs it serves. Yields the mode, ``mps`` or ``time-sliced``,
    logged with the reason. Without ``nvidia-cuda-mps-control``, or when it fails, one warning line and
    the run shares its GPU time-sliced. Call it after the GPU is chosen and before CUDA starts."""
    if PIPE_VARIABLE in environ:
        pipe = Path(environ[PIPE_VARIABLE])
        if answers(pipe):
            print(
                f"{MODE}mps (the daemon in {PIPE_VARIABLE}={pipe}, not started or stopped here)",
                file=log,
                flush=True,
            )
            yield "mps"
        else:
            yield _time_sliced(log, f"no MPS control daemon answers in {PIPE_VARIABLE}={pipe}")
        return
    gpus = device_list(environ.get("CUDA_VISIBLE_DEVICES", ""))
    executable = shutil.which(CONTROL, path=environ.get("PATH"))
    folder = mps_folder(gpus[0], environ) if len(gpus) == 1 else None
    if len(gpus) != 1:
        problem = f"the job sees {len(gpus)} GPUs (CUDA_VISIBLE_DEVICES), not the one it shares"
    elif executable is None:
        problem = f"{CONTROL} is not on PATH (it comes with the NVIDIA driver)"
    elif len(str(folder / "pipe")) > PIPE_PATH_LIMIT:
        problem = (
            f"the MPS pipe folder {folder / 'pipe'} is too long a path for a socket (set TMPDIR shorter)"
        )
    else:
        problem = None
    if problem is not None:
        yield _time_sliced(log, problem)
        return
    own_folder(lock_folder())
    folder.mkdir(mode=0o700, exist_ok=True)
    pipe, logs = folder / "pipe", folder / "log"
    with open(folder / "start.lock", "a") as mutex:
        fcntl.flock(mutex, fcntl.LOCK_EX)
        started = not answers(pipe)
        problem = _start(executable, environ, pipe, logs) if started else None
        user = None if problem else open(folder / "users.lock", "a")  # held past this block
        if user is not None:
            fcntl.flock(user, fcntl.LOCK_SH)
        fcntl.flock(mutex, fcntl.LOCK_UN)
    if user is None:
        yield _time_sliced(log, problem)
        return
    how = "started by this job" if started else "already running"
    print(f"{MODE}mps (control daemon {how}, {PIPE_VARIABLE}={pipe}, GPU {gpus[0]})", file=log, flush=True)
    environ.update(_control({}, pipe, logs))
    environ["CUDA_VISIBLE_DEVICES"] = "0"  # the daemon serves only this GPU, and numbers it 0
    try:
        yield "mps"
    finally:
        with open(folder / "start.lock", "a") as mutex:
            fcntl.flock(mutex, fcntl.LOCK_EX)
            user.close()  # no new user can come while the mutex is held: the conversion is safe
            last = try_lock(folder / "users.lock", fcntl.LOCK_EX)
            if last is None:
                print(f"{MODE}other jobs still use the MPS control daemon: left running", file=log)
            else:
                with last:
                    if problem := _quit(executable, environ, pipe, logs):
                        _warn(log, problem)
                    else:
                        print(f"{MODE}the last job on GPU {gpus[0]}: quit the MPS control daemon", file=log)
            log.flush()
