"""``attngeom train --seeds 0,1`` killed at random moments, then the same command again, many times.

Run as ``python stacked_kills.py FOLDER KILLS SEED``: FOLDER holds ``corpus.txt``; the command trains the
runs ``FOLDER/killed-{seed}`` (killed ``KILLS`` times, then run to its end) and ``FOLDER/whole-{seed}``
(never killed). Every run of the command is a process of its own, forked from this one once the package
is imported (imports take seconds on a loaded machine, the kill points are what is tested), and is killed
with a real SIGKILL or SIGTERM at a moment drawn from ``random.Random(SEED)``: during its setup (reading
the corpus, building the models, resuming), while its second run's checkpoint is being written (the first
run's already in place: where a stacked process could not resume from), or between or during its steps,
log and checkpoint writes. Prints one JSON line: for each run of the command, in order, its exit code
(minus the signal that ended it), the checkpoint steps each killed run's folder then holds, and the
temporaries left in their checkpoint folders.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

import attngeom.cli
import attngeom.training.stacked  # noqa: F401 (imported before the forks: what each would import)
from attngeom.training.checkpoint import held_checkpoints

SETTINGS = [
    "n_layers=2",
    "hidden_size=128",  # checkpoints of a few MB: a write takes a while, as a real one does
    "n_heads=4",
    "intermediate_size=512",
    "seq_len=32",
    "vocab_size=300",
    "batch_size=4",
    "grad_accum=1",
    "steps=60",
    "warmup_steps=5",
    "checkpoint_every=3",
    "log_every=3",
    "score_every=30",
    "device=cpu",
]
INTERVAL = 3
"""Steps between checkpoints (``checkpoint_every``)."""


def command(folder: Path, name: str) -> list[str]:
    out = str(folder / f"{name}-{{seed}}")
    corpus = [f"dataset={folder / 'corpus.txt'}", f"cache_dir={folder / 'cache'}"]
    return ["train", "--seeds", "0,1", "--out", out, "--quiet", *SETTINGS, *corpus]


def start(argv: list[str]) -> int:
    """A child process running ``attngeom`` as the command would (its signal handlers installed)."""
    pid = os.fork()
    if pid == 0:
        sys.argv = ["attngeom", *argv]
        code = 1
        try:
            code = attngeom.cli.main()
        finally:
            os._exit(code)
    return pid


ENDED: dict[int, int] = {}
"""Children reaped while polling: pid → exit code (minus the signal that ended it)."""


def ended(pid: int, wait: bool) -> int | None:
    """The child's exit code, or minus the signal that ended it; None if it runs on (``wait`` False)."""
    if pid not in ENDED:
        done, status = os.waitpid(pid, 0 if wait else os.WNOHANG)
        if not done:
            return None
        ENDED[pid] = os.waitstatus_to_exitcode(status)
    return ENDED[pid]


def written(folder: Path, run: str, pid: int, give_up_s: float) -> None:
    """Returns once the child has put a new checkpoint of ``run`` in place, or has ended, or ``give_up_s``
    passed. A new checkpoint is a first ``state.pt``, or a new ``previous.pt`` (the writer moves the
    latest there as it puts the next in place; resuming only removes or renames checkpoints)."""
    checkpoints = folder / run / "checkpoint"

    def inode(name: str) -> int | None:
        try:
            return (checkpoints / name).stat().st_ino
        except FileNotFoundError:
            return None

    first, previous = inode("state.pt") is None, inode("previous.pt")
    end = time.monotonic() + give_up_s
    while time.monotonic() < end and ended(pid, wait=False) is None:
        now = inode("previous.pt")
        if (now is not None and now != previous) or (first and inode("state.pt") is not None):
            return
        time.sleep(0.0002)


def held(folder: Path) -> list[list[int]]:
    return [
        sorted(held_checkpoints(folder / f"killed-{seed}" / "checkpoint" / "state.pt")) for seed in (0, 1)
    ]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("killed-*/checkpoint/.*") if ".tmp" in p.name)


def main() -> None:
    folder, kills, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    began = time.monotonic()
    pid = start(command(folder, "whole"))
    written(folder, "whole-0", pid, 600)
    setup_s = time.monotonic() - began
    outcomes = [[finish(pid)]]
    step_s = (time.monotonic() - began - setup_s) / (60 / INTERVAL)
    for _ in range(kills):
        pid = start(command(folder, "killed"))
        moment = rng.choice(["setup", "second run's write", "steps"])
        if moment == "setup":  # a random moment, at the latest its first checkpoint
            written(folder, "killed-0", pid, rng.uniform(0, setup_s))
        elif moment == "second run's write":  # the first run's is in place, the second's being written
            written(folder, "killed-0", pid, 60)
        else:
            written(folder, "killed-0", pid, 60)
            time.sleep(rng.uniform(0, step_s))
        chosen = rng.choice([signal.SIGKILL, signal.SIGTERM])
        if ended(pid, wait=False) is None:
            os.kill(pid, chosen)
        outcomes.append([finish(pid), *held(folder), temporaries(folder)])
    outcomes.append([finish(start(command(folder, "killed"))), *held(folder), temporaries(folder)])
    print(json.dumps(outcomes))


def finish(pid: int) -> int:
    code = ended(pid, wait=True)
    assert code is not None
    return code


if __name__ == "__main__":
    main()
