"""What became of a scoring job: ``ok``, ``failed`` (input we cannot score: an ``InputError``, with its
reason) or ``crashed`` (a defect of ours, with the exception's one-line summary). Either way the job ends well and
writes its status, so one bad model never stops the tables of the others; the log keeps the traceback.

A status and a reason are results a colleague reads on another machine: ``portable`` rewrites the
machine's own paths (the model's folder, the working directory, the virtual environment, the home).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

PREFIX = "attngeom: error: "


def portable(text: str, names: dict[str, str] | None = None) -> str:
    """``text`` without absolute paths of this machine: each key of ``names`` (a path) becomes its value,
    then the working directory becomes relative, the Python environment ``<venv>`` and the home ``~``."""
    replacements = dict(names or {})
    for path, name in list(replacements.items()):
        replacements.setdefault(str(Path(path).resolve()), name)
    replacements.setdefault(os.getcwd() + os.sep, "")
    replacements.setdefault(sys.prefix, "<venv>")
    replacements.setdefault(str(Path(sys.prefix).resolve()), "<venv>")
    replacements.setdefault(str(Path.home()), "~")
    for path in sorted(replacements, key=len, reverse=True):  # the most specific path first
        if os.path.isabs(path) and path not in (os.sep, ""):
            text = text.replace(path, replacements[path])
    return text


def one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.strip().splitlines() if line.strip())


@dataclass(frozen=True)
class ScoreJob:
    """One model to score and the three files its job writes (Parquet, status JSON, log)."""

    model: str  # the config's id: the records' model_id and the status's model
    location: str  # what `attngeom score` reads: a hub id (or org/name/file.gguf) or a local path
    revision: str  # "" for none
    scores: str
    status: str
    log: str
    local: bool = False  # a local path or a folder a rule built, never a hub id


@dataclass(frozen=True)
class ScoreOptions:
    """How the workflow scores (its config's ``scoring:``), as plain values: the DAG imports this module,
    and torch is for the job (``engine.Settings`` checks them there)."""

    device: str = "cpu"
    dtype: str = "float64"
    variant: str = "excess"
    full_download: bool = False


def score_and_record(job: ScoreJob, options: ScoreOptions = ScoreOptions(), gpus: int = 0) -> dict:
    """``job`` scored in this process (``engine.score_to_file``, as ``attngeom score`` does), holding
    ``gpus`` GPUs of a local pipeline's (attngeom.pipeline.gpus): its Parquet file (empty when not scored),
    its status with the seconds taken, its log. An ``InputError`` is the model's failure, any other
    exception a crash of ours (its traceback in the log). Returns the status."""
    from .gpus import job_gpus

    start = time.monotonic()
    # appended: the job emptied its log when it started, and its own output goes there too (job_log)
    with open(job.log, "a") as log, contextlib.ExitStack() as holding:
        revision = f" at revision {job.revision}" if job.revision else ""
        log.write(f"scoring {job.location}{revision} as {job.model}: {options}\n")
        try:
            holding.enter_context(job_gpus(gpus, log))  # the GPU locks cannot be taken: this model fails
            problem = local_problem(job.location) if job.local else None
            if problem:
                raise InputError(problem)
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                _score(job, options)
            outcome = {"status": "ok"}
        except InputError as err:
            log.write(f"{PREFIX}{err}\n")
            outcome = {"status": "failed", "reason": one_line(str(err))}
        except Exception as err:  # a defect of ours; the traceback goes to the log
            traceback.print_exc(file=log)
            first = str(err).strip().splitlines()
            reason = f"{type(err).__name__}: {first[0] if first else ''}".rstrip(": ")
            outcome = {"status": "crashed", "reason": reason}
    return _record(job, {"seconds": round(time.monotonic() - start, 3), **outcome})


def _score(job: ScoreJob, options: ScoreOptions) -> None:
    from ..engine import DTYPES, Settings, score_to_file
    from ..scores import GAMMA

    if options.dtype not in DTYPES:
        raise InputError(f"scoring dtype {options.dtype!r}: choose one of {', '.join(DTYPES)}")
    settings = Settings.checked(options.device, DTYPES[options.dtype], options.variant, GAMMA)
    score_to_file(
        job.location,
        job.scores,
        settings,
        model_id=job.model,
        revision=job.revision or None,
        full_download=options.full_download,
    )


def local_problem(location: str) -> str | None:
    """Why the local weights at ``location`` cannot be scored before reading them: the path does not
    exist (``attngeom score`` would take a missing relative path for a Hub id), or the rule that built
    them left a note saying why it could not (``random_models.FAILED_NOTE``)."""
    from .random_models import FAILED_NOTE

    path = Path(location)
    if not path.exists():
        return f"local weights {location} not found; fix the model's `path:` in the config"
    note = path / FAILED_NOTE
    if path.is_dir() and note.is_file():
        return one_line(note.read_text(encoding="utf-8", errors="replace")) or "the model could not be built"
    return None


def record_lost(job: ScoreJob, reason: str) -> dict:
    """The status of a model whose scoring process died before it could write one (``crashed``)."""
    return _record(job, {"status": "crashed", "reason": reason})


def _record(job: ScoreJob, outcome: dict) -> dict:
    from ..files import write_text
    from ..record_files import write_parquet
    from ..records import SCHEMA

    record = {"model": job.model, **outcome}
    if "reason" in record:
        record["reason"] = portable(record["reason"], {job.location: job.model})
    if record["status"] != "ok":
        write_parquet(SCHEMA.empty_table(), job.scores)  # no rows, the records' columns
    write_text(job.status, json.dumps(record, indent=1) + "\n")
    return record
