"""A rule's ``log:`` as its job's output: what the job prints, warns or logs and the traceback that ends it.

Snakemake runs a ``script:`` in a process of its own and leaves its stdout and stderr on the console of
whoever started the run (a login node's terminal, a SLURM job's output file the plugin deletes), so a
failed job's error would be found nowhere else. Every script under ``scripts/`` therefore calls
``to_rule_log`` first: the process's file descriptors 1 and 2 become the log, so Python's prints and
warnings, C libraries' messages, child processes (torchrun) and the traceback of an uncaught exception all
land there, as a shell rule's ``2> {log}`` would have them, and ``snakemake --show-failed-logs`` prints it.
A zoo's batch job (one log a batch) appends each model's scoring log to it in turn as the model ends.
"""

from __future__ import annotations

import os
import sys


def to_rule_log(path: str) -> None:
    """From here on this process's stdout and stderr, and those of the processes it starts, are the log
    ``path`` (emptied first: the log of this run of the job)."""
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # in order beside stderr's lines
