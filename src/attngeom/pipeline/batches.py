"""A zoo's models are scored in batches: one job, and one Python process, for many models.

Starting Python with torch and transformers takes seconds; scoring a small model, a fraction of one. At
Hub scale a job per model spends most of its time importing (benchmarks/README.md), and thousands of
short jobs burden a cluster's scheduler. A batch imports once, then scores each of its models in a forked
child: a model that kills its process (out of memory, a crash in native code) is recorded as crashed and
the batch goes on with the next one, so every model of the batch gets its Parquet file and status.

Batches hold models of one device, sorted by size, so a batch asks for the memory of its largest model
and the time of all of them.

A batch's records are two files, not two a model (``score_into``): its models' scores in one Parquet file
(each row names its model, as in any records file) and their statuses in one JSON list, with one log. A
workflow's DAG holds its files, and Snakemake spends about a millisecond of CPU on each file of a job; two
files a model were 200,000 files at 100,000 models and minutes of planning (benchmarks/README.md, the zoo).
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import interrupts
from .outcome import ScoreJob, ScoreOptions, record_lost, score_and_record
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


@dataclass(frozen=True)
class BatchFiles:
    """Where a batch's records go: every model's scores, the statuses (a JSON list), the log."""

    scores: str
    status: str
    log: str


def score_into(
    models: list[tuple[str, str, str]], files: BatchFiles, options: ScoreOptions, threads: int, gpus: int = 0
) -> list[dict]:
    """``models`` (id, location, revision) scored by ``score_batch`` into the batch's ``files``: each model's
    log appended to the batch log as it ends, then the scores of those scored in one Parquet file (with the
    records' schema, no row when none was) and, last, every model's status. Returns the statuses."""
    import pyarrow as pa  # here, not above: the DAG imports this module to plan batches
    import pyarrow.parquet as pq

    from ..files import write_text
    from ..records import to_table, write_scores

    scratch = Path(tempfile.mkdtemp(prefix="attngeom-batch."))
    interrupts.track(scratch)
    try:
        jobs = [
            ScoreJob(
                model,
                location,
                revision,
                *(str(scratch / f"{i}.{kind}") for kind in ("parquet", "json", "log")),
            )
            for i, (model, location, revision) in enumerate(models)
        ]
        Path(files.log).write_text("")
        statuses = score_batch(jobs, options, threads, gpus, batch_log=files.log)
        scored = [
            pq.read_table(job.scores)
            for job, status in zip(jobs, statuses, strict=True)
            if status["status"] == "ok"
        ]
        write_scores(pa.concat_tables(scored) if scored else to_table([]), files.scores)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        interrupts.untrack(scratch)
    write_text(files.status, json.dumps(statuses, indent=1) + "\n")
    return statuses


def score_batch(
    jobs: list[ScoreJob], options: ScoreOptions, threads: int, gpus: int = 0, batch_log: str | None = None
) -> list[dict]:
    """Every job scored in a child forked from this process (which imports everything once first), each
    child holding ``gpus`` of a local pipeline's GPUs; returns each job's status, a dead child's written
    here. ``batch_log``: each job's log is appended to it once the job has ended."""
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
        if batch_log is not None:
            with open(batch_log, "a") as log:
                log.write(f"== {job.model}: {statuses[-1]['status']}\n")
                log.write(Path(job.log).read_text(errors="replace") if Path(job.log).is_file() else "")
    return statuses


def _import_once() -> None:
    """What every child needs, imported before the first fork (no torch thread pool started yet)."""
    import pandas  # noqa: F401

    from .. import architectures, engine, records, sources  # noqa: F401


def _score_in_child(job: ScoreJob, options: ScoreOptions, threads: int, gpus: int) -> None:
    import torch

    torch.set_num_threads(threads)
    score_and_record(job, options, gpus)


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        hint = " (out of memory?)" if -exitcode == signal.SIGKILL else ""
        return f"the scoring process was killed by {name}{hint}; see its log"
    return f"the scoring process ended with exit code {exitcode} before recording a status; see its log"
