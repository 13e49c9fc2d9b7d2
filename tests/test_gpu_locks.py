"""GPU slot locks that cannot be taken (issue 32, point 6): a read-only lock folder, a file where the folder
should be, another user's folder or lock, a folder or a FIFO as a lock: each one line naming it, at once (a
FIFO is never opened), and a scoring job records the model as failed with that line, no traceback."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from conformance import build, tiny_config

from attngeom.errors import InputError
from attngeom.pipeline.gpus import LOCKS_VARIABLE, SLOTS_VARIABLE, hold_gpus, hold_share
from attngeom.pipeline.outcome import ScoreJob, score_and_record

NOBODY = 65534


def as_root() -> bool:
    return os.getuid() == 0


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` no process may add files to: immutable for root (who ignores modes), else mode 0500."""
    if as_root():
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(folder)]).returncode:
            pytest.skip("root, and this filesystem cannot make a folder immutable")
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
    else:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)


def broken(kind: str, folder: Path) -> contextlib.AbstractContextManager:
    """The lock folder ``folder`` (GPU "0"'s lock ``0.lock`` in it) broken as ``kind`` says."""
    lock = folder / "0.lock"
    if kind == "file as folder":
        folder.write_text("not a folder")
    elif kind == "read-only folder":
        folder.mkdir()
        return read_only(folder)
    elif kind == "another user's folder":
        folder.mkdir()
        if not as_root():
            pytest.skip("only root can give a folder to another user")
        os.chown(folder, NOBODY, NOBODY)
    elif kind == "another user's lock":
        folder.mkdir()
        lock.touch()
        if not as_root():
            pytest.skip("only root can give a file to another user")
        os.chown(lock, NOBODY, NOBODY)
    elif kind == "folder as lock":
        lock.mkdir(parents=True)
    elif kind == "fifo as lock":
        folder.mkdir()
        os.mkfifo(lock)
    elif kind == "link as lock":
        folder.mkdir()
        lock.symlink_to(folder.parent / "elsewhere")
    return contextlib.nullcontext()


KINDS = [
    "file as folder",
    "read-only folder",
    "another user's folder",
    "another user's lock",
    "folder as lock",
    "fifo as lock",
    "link as lock",
]


def within(seconds: float, call) -> BaseException | None:
    """What ``call()`` raised, run in a thread; a call still waiting after ``seconds`` fails the test."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as err:  # returned to the test
            raised[0] = err

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), "taking the GPU lock hangs"
    return raised[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["whole GPU", "share"])
def test_a_lock_that_cannot_be_taken_is_one_line_at_once(tmp_path, kind, how):
    folder = tmp_path / "locks"
    log = io.StringIO()

    def take() -> None:
        holding = (
            hold_gpus(1, ["0"], folder, log) if how == "whole GPU" else hold_share(1, 2, ["0"], folder, log)
        )
        with holding:
            pass

    with broken(kind, folder):
        err = within(20, take)
    assert isinstance(err, InputError), repr(err)
    assert "\n" not in str(err) and str(folder) in str(err)
    if kind == "fifo as lock":
        assert "not a regular file" in str(err)


def test_a_scoring_job_whose_lock_cannot_be_taken_records_one_failed_line(tmp_path, monkeypatch):
    model = tmp_path / "tiny"
    config = tiny_config(
        "llama", hidden_size=32, num_attention_heads=4, num_hidden_layers=1, intermediate_size=64
    )
    build(config).save_pretrained(model)
    folder = tmp_path / "locks"
    folder.mkdir()
    os.mkfifo(folder / "0.lock")
    monkeypatch.setenv(SLOTS_VARIABLE, "0")
    monkeypatch.setenv(LOCKS_VARIABLE, str(folder))
    job = ScoreJob(
        "tiny", str(model), "", str(tmp_path / "s.parquet"), str(tmp_path / "s.json"), str(tmp_path / "s.log")
    )
    assert within(60, lambda: score_and_record(job, gpus=1)) is None
    recorded = json.loads(Path(job.status).read_text())
    assert recorded["status"] == "failed" and "not a regular file" in recorded["reason"]
    log = Path(job.log).read_text()
    assert "Traceback" not in log and log.count("attngeom: error: ") == 1
