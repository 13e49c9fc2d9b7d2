"""Which GPU each pipeline job runs on, when the jobs run on this machine.

Snakemake counts GPUs (the global resource ``gpu``) but never says which GPU a job gets. So the
Snakefile, run locally, finds this machine's GPUs (``machine_gpus``), makes the ``gpu`` resource their
number and hands the list and a lock folder to its jobs through the environment (``SLOTS_VARIABLE``,
``LOCKS_VARIABLE``). A job that needs k GPUs takes k of them (``job_gpus``): one lock file per GPU,
held with ``flock``, which the kernel releases when the job's process ends, however it ends; then it
sets ``CUDA_VISIBLE_DEVICES`` before anything in the job initialises CUDA (and ``CUDA_DEVICE_ORDER``, if
unset, to nvidia-smi's order, so GPU 1 is the GPU nvidia-smi calls 1). A job that needs none sees
none. A training run that shares its GPU (``runs_per_gpu``) takes slots of one GPU instead
(``hold_share``): each GPU is cut into ``PER_GPU_VARIABLE`` slots, one lock file each. Under SLURM
nothing is handed out: the scheduler pins each job's GPUs itself.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TextIO
from urllib.parse import quote

from ..errors import InputError

SLOTS_VARIABLE = "ATTNGEOM_GPU_SLOTS"
"""The GPUs a local pipeline's jobs share, comma-separated ids as ``CUDA_VISIBLE_DEVICES`` takes them."""
LOCKS_VARIABLE = "ATTNGEOM_GPU_LOCKS"
"""The folder of their lock files (one per GPU, and one per slot of a GPU)."""
PER_GPU_VARIABLE = "ATTNGEOM_GPU_SLOTS_PER_GPU"
"""How many slots each GPU is cut into for the jobs that share one (1 when none does)."""
RECORD = "gpu slots: "
"""Prefix of the two lines a job logs: the GPUs it holds from when, and when it gave them back."""
POLL_SECONDS = 0.5


def device_list(value: str) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: ids up to the first empty or negative one."""
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item or item.startswith("-"):
            break
        out.append(item)
    return out


def machine_gpus(environ: Mapping[str, str] = os.environ) -> tuple[list[str], str | None]:
    """The GPUs this machine offers the pipeline, and a warning when it could not tell.

    ``CUDA_VISIBLE_DEVICES`` when it is set (the user's choice, or what an allocation gave), else every
    GPU that ``nvidia-smi`` lists; none without either.
    """
    if "CUDA_VISIBLE_DEVICES" in environ:
        return device_list(environ["CUDA_VISIBLE_DEVICES"]), None
    nvidia_smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if nvidia_smi is None:
        return [], None
    command = [nvidia_smi, "--query-gpu=index", "--format=csv,noheader"]
    try:
        listing = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as err:
        return (
            [],
            f"{' '.join(command)} failed ({err}): no job gets a GPU; set CUDA_VISIBLE_DEVICES to choose them",
        )
    return [line.strip() for line in listing.splitlines() if line.strip()], None


def lock_folder() -> Path:
    """Per user and machine-local (under the temporary folder): another user's jobs are not seen."""
    return Path(tempfile.gettempdir()) / f"attngeom-gpus-{os.getuid()}"


def share_gpus(
    gpus: Sequence[str], folder: Path, environ: dict[str, str] = os.environ, slots_per_gpu: int = 1
) -> None:
    """Hand ``gpus``, their lock folder and how many slots each has to the jobs this process starts
    (they inherit ``environ``)."""
    environ[SLOTS_VARIABLE] = ",".join(gpus)
    environ[LOCKS_VARIABLE] = str(folder)
    environ[PER_GPU_VARIABLE] = str(slots_per_gpu)


def own_folder(folder: Path) -> Path:
    """``folder`` made if missing, and checked to be a folder of this user's that takes new files."""
    fix = "set TMPDIR to a writable folder of yours"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        found = folder.lstat()
    except OSError as err:
        raise InputError(f"GPU lock folder {folder}: {err.strerror}; {fix}") from None
    if not stat.S_ISDIR(found.st_mode):
        raise InputError(f"GPU lock folder {folder} is not a folder; remove it, or {fix}")
    if found.st_uid != os.getuid():
        raise InputError(f"GPU lock folder {folder} belongs to another user; {fix}")
    return folder


def _open_lock(path: Path) -> TextIO:
    """The lock file ``path`` opened (made if missing) to be locked; anything but a regular file of this
    user's (a FIFO, a folder, a link, another user's file) is refused in one line and never opened."""
    fix = f"remove it, or set TMPDIR to a folder of yours (the locks are in {path.parent})"
    found = _lstat(path)
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise InputError(f"GPU lock {path} is not a regular file; {fix}")
    try:  # no link followed, no wait on a FIFO put there since
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as err:
        raise InputError(f"GPU lock {path}: {err.strerror}; {fix}") from None
    found = os.fstat(handle)
    if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid():
        os.close(handle)
        whose = "not a regular file" if not stat.S_ISREG(found.st_mode) else "another user's file"
        raise InputError(f"GPU lock {path} is {whose}; {fix}")
    return os.fdopen(handle, "a")


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return path.lstat()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise InputError(f"GPU lock {path}: {err.strerror}; set TMPDIR to a folder of yours") from None


@contextlib.contextmanager
def hold_gpus(count: int, gpus: Sequence[str], folder: Path, log: TextIO) -> Iterator[list[str]]:
    """``count`` of ``gpus``, the lowest free ones, for the duration of the block.

    While fewer are free (another pipeline of this user holds them) it waits, holding none meanwhile, so
    two jobs that each need several GPUs never wait on each other. The lock files stay empty.
    """
    if count > len(gpus):
        raise InputError(
            f"the job needs {count} GPUs and the pipeline has {len(gpus)} ({','.join(gpus) or 'none'}); "
            "run it on a machine with more, or lower its gpus"
        )
    own_folder(folder)
    held: list[tuple[str, TextIO]] = []
    waiting = False
    try:
        while True:
            for gpu in gpus:
                if len(held) == count:
                    break
                handle = _open_lock(folder / f"{quote(gpu, safe='')}.lock")  # held past this loop
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    handle.close()
                    continue
                held.append((gpu, handle))
            if len(held) == count:
                break
            for _, handle in held:
                handle.close()
            held = []
            if not waiting:
                print(f"{RECORD}waiting for {count} free of {','.join(gpus)} (locks in {folder})", file=log)
                waiting = True
            time.sleep(POLL_SECONDS)
        yield [gpu for gpu, _ in held]
    finally:
        for _, handle in held:
            handle.close()


def try_lock(path: Path, operation: int) -> TextIO | None:
    """``path`` opened and locked (``fcntl.LOCK_SH`` or ``LOCK_EX``) without waiting; None if taken."""
    handle = _open_lock(path)  # held by the caller past this function
    try:
        fcntl.flock(handle, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


@contextlib.contextmanager
def hold_share(
    slots: int, per_gpu: int, gpus: Sequence[str], folder: Path, log: TextIO
) -> Iterator[list[str]]:
    """``slots`` of the ``per_gpu`` slots of one of ``gpus``, for the duration of the block; the GPU
    yielded as a list of one.

    The jobs sharing a GPU each hold its lock file shared (so a job that needs the whole GPU, which
    holds it exclusively in ``hold_gpus``, gets neither it nor in the way) and their slots' lock files
    exclusively, so at most ``per_gpu`` slots of a GPU are ever held. Of the GPUs with enough free slots
    the one with the most is taken (the lowest on a tie): K runs spread over the GPUs before they pile
    onto one. While none has enough it waits, holding nothing.
    """
    if not gpus:
        raise InputError(
            "the job needs a share of a GPU and the pipeline has none (CUDA_VISIBLE_DEVICES, nvidia-smi); "
            "run it on a machine with a GPU"
        )
    own_folder(folder)
    waiting = False
    while True:
        best: list[TextIO] = []
        chosen = None
        for gpu in gpus:
            name = quote(gpu, safe="")
            handles = [try_lock(folder / f"{name}.lock", fcntl.LOCK_SH)]
            if handles[0] is not None:
                handles += [try_lock(folder / f"{name}.slot{i}.lock", fcntl.LOCK_EX) for i in range(per_gpu)]
            held = [handle for handle in handles if handle is not None]
            if len(held) - 1 >= slots and len(held) > len(best):
                best, held, chosen = held, best, gpu
            for handle in held:
                handle.close()
        if chosen is not None:
            break
        if not waiting:
            print(
                f"{RECORD}waiting for {slots} free slots of one of {','.join(gpus)} (locks in {folder})",
                file=log,
            )
            waiting = True
        time.sleep(POLL_SECONDS)
    for handle in best[1 + slots :]:  # the GPU's lock and ``slots`` slots stay held
        handle.close()
    try:
        yield [chosen]
    finally:
        for handle in best[: 1 + slots]:
            handle.close()


@contextlib.contextmanager
def job_gpus(
    count: int, log: TextIO, environ: dict[str, str] = os.environ, slots: int = 0
) -> Iterator[list[str] | None]:
    """What a pipeline job runs under. With a local pipeline's GPUs handed out: ``count`` of them held
    (or, for ``count`` 0 and ``slots`` > 0, that many slots of one GPU) and made the only ones CUDA sees
    (none for ``count`` and ``slots`` 0), their ids yielded, and both moments logged (``read_records``).
    Otherwise (SLURM, or outside a pipeline) nothing changes and None is yielded."""
    if SLOTS_VARIABLE not in environ:
        yield None
        return
    gpus = device_list(environ[SLOTS_VARIABLE])
    folder = Path(environ[LOCKS_VARIABLE])
    per_gpu = int(environ.get(PER_GPU_VARIABLE, "1"))
    share = count == 0 and slots > 0
    holding = hold_share(slots, per_gpu, gpus, folder, log) if share else hold_gpus(count, gpus, folder, log)
    with holding as held:
        environ["CUDA_VISIBLE_DEVICES"] = ",".join(held)
        environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # ids as nvidia-smi numbers the GPUs
        shared = {"slots": f"{slots} of {per_gpu}"} if share else {}
        _record(log, held=held, of=gpus, pid=os.getpid(), **shared)
        try:
            yield held
        finally:
            _record(log, released=held)


def _record(log: TextIO, **fields: object) -> None:
    now = datetime.datetime.now(datetime.UTC).isoformat()
    print(RECORD + json.dumps({**fields, "at": now}), file=log, flush=True)


def read_records(text: str) -> list[dict]:
    """The GPU holds a job log records: ``gpus`` (ids), ``start`` and ``end`` (datetimes; ``end`` None
    if the job ended before it could log it), ``pid``, and ``slots`` ("k of n" for a share of a GPU,
    else None)."""
    holds: list[dict] = []
    for line in text.splitlines():
        if not line.startswith(RECORD + "{"):
            continue
        fields = json.loads(line.removeprefix(RECORD))
        at = datetime.datetime.fromisoformat(fields["at"])
        if "held" in fields:
            holds.append(
                {
                    "gpus": fields["held"],
                    "start": at,
                    "end": None,
                    "pid": fields["pid"],
                    "slots": fields.get("slots"),
                }
            )
        elif holds and holds[-1]["end"] is None and holds[-1]["gpus"] == fields["released"]:
            holds[-1]["end"] = at
    return holds
