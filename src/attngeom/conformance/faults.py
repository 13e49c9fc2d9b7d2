"""Errors of the conformance run's own observation code, kept apart from a model's.

A tiny model's forward pass runs attngeom's hooks, function modes and capturing attention function inside
the model's code. An exception raised there is a defect of the run, not a verdict on the model: it is
wrapped in ``ObservationError``, which every "the model failed: try the next input" handler lets through,
so it fails the conformance run instead of refusing the type (FSMT was refused for an error of ours).
"""

from __future__ import annotations

import traceback
from contextlib import ContextDecorator

FRAMES = 4
"""Frames of the original traceback kept in the message (a worker's error crosses a process boundary)."""


class ObservationError(RuntimeError):
    """An exception raised in attngeom's own observation code during a tiny model's forward pass."""


class observing(ContextDecorator):  # noqa: N801 — used as a decorator and a ``with`` block
    """Within the block (or the decorated function), any exception but a timeout, an interrupt or an
    ``ObservationError`` already made becomes an ``ObservationError`` naming ``where`` and the frames it
    came from."""

    def __init__(self, where: str):
        self.where = where

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if err is None or not isinstance(err, Exception) or isinstance(err, (ObservationError, TimeoutError)):
            return False
        frames = "".join(traceback.format_tb(tb)[-FRAMES:])
        raise ObservationError(f"{self.where}: {type(err).__name__}: {err}\n{frames}") from err
