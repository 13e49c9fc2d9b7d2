"""A zoo's models are scored in batches: one job, and one Python process, for many models.

Starting Python with torch and transformers takes seconds; scoring a small model, a fraction of one. At
Hub scale a job per model spends most of its time importing (benchmarks/README.md), and thousands of
short jobs burden a cluster's scheduler. A batch imports once, then scores each of its models in a forked
child: a model that kills its process (out of memory, a crash in native code) is recorded as crashed and
the batch goes on with the next one, so every model of the batch gets its Parquet file and status.

Batches hold models of one device, sorted by size, so a batch asks for the memory of its largest model
and the time of all of them.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
from dataclasses import dataclass
from pathlib import Path

from .outcome import ScoreJob, record_lost, score_and_record
from .registry import Model, Resources, score_resources, weight_bytes

PARENT_MB = 512
"""Memory of the batch's own process (the imports), beside the largest model's estimate."""


@dataclass(frozen=True)
class Batch:
    name: str
    slugs: tuple[str, ...]
    resources: Resources


def plan_batches(models: list[Model], scoring: dict, size: int) -> list[Batch]:
    """``models`` in batches of at most ``size``: CPU models first, then GPU ones, each by size."""
    batches: list[Batch] = []
    needs = {m.slug: score_resources(m, scoring) for m in models}
    for gpu in (0, 1):
        chosen = [m for m in models if needs[m.slug].gpu == gpu]
        chosen.sort(key=lambda m: (weight_bytes(m), m.id))
        for start in range(0, len(chosen), size):
            part = chosen[start : start + size]
            each = [needs[m.slug] for m in part]
            resources = Resources(
                threads=max(r.threads for r in each),
                mem_mb=max(r.mem_mb for r in each) + PARENT_MB,
                runtime=10 + sum(r.runtime - 9 for r in each),  # one job's 10-minute margin, once
                disk_mb=1024 + sum(r.disk_mb - 1024 for r in each),
                gpu=gpu,
            )
            name = f"{'gpu' if gpu else 'cpu'}{len(batches):03d}"
            batches.append(Batch(name, tuple(m.slug for m in part), resources))
    return batches


def score_batch(jobs: list[ScoreJob], options: list[str], threads: int, gpus: int = 0) -> list[dict]:
    """Every job scored in a child forked from this process (which imports everything once first), each
    child holding ``gpus`` of a local pipeline's GPUs; returns each job's status, a dead child's written
    here."""
    _import_once()
    context = multiprocessing.get_context("fork")
    statuses = []
    for job in jobs:
        Path(job.status).unlink(missing_ok=True)
        child = context.Process(target=_score_in_child, args=(job, options, threads, gpus))
        child.start()
        child.join()
        if child.exitcode == 0 and Path(job.status).is_file():
            statuses.append(json.loads(Path(job.status).read_text()))
        else:
            with open(job.log, "a") as log:
                log.write(f"\n{_death(child.exitcode)}\n")
            statuses.append(record_lost(job, _death(child.exitcode)))
    return statuses


def _import_once() -> None:
    """What every child needs, imported before the first fork (no torch thread pool started yet)."""
    import pandas  # noqa: F401

    from .. import architectures, cli, engine, records, sources  # noqa: F401

    cli.build_parser()  # imports the subcommands' modules too


def _score_in_child(job: ScoreJob, options: list[str], threads: int, gpus: int) -> None:
    import torch

    torch.set_num_threads(threads)
    score_and_record(job, options, gpus)


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        hint = " (out of memory?)" if -exitcode == signal.SIGKILL else ""
        return f"the scoring process was killed by {name}{hint}; see its log"
    return f"the scoring process ended with exit code {exitcode} before recording a status; see its log"
