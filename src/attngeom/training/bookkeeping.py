"""What the training loop records, and when: the loss log, the score log, the schedule of its actions.

Both logs are Parquet files with a ``step`` column, rewritten atomically (the score log on every append, the
loss log at every checkpoint), so a run killed at any moment leaves a readable log; a resumed run keeps
only the rows up to its checkpoint, which is why the loss log needs no rows on disk beyond it. Both carry
page checksums and a content digest (``attngeom.record_files``), and a loss log must hold one row per
step in order: each is checked when read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from ..errors import InputError
from ..record_files import AGAIN, DamagedRecord, read_parquet, write_parquet
from ..records import conform
from .config import TrainConfig


class Diverged(InputError):
    """The loss is no longer a finite number: settings the user can change (lr, warm-up) caused it."""


@dataclass(frozen=True)
class Schedule:
    """After which optimizer steps (counted from 1) the loop logs, scores and checkpoints."""

    log_every: int
    score_every: int
    checkpoint_every: int
    steps: int
    """The run's length: the final scores are taken there."""
    end: int
    """Where this call stops (``stop_at``, at most ``steps``): a checkpoint is written there."""

    @classmethod
    def of(cls, config: TrainConfig, end: int) -> Schedule:
        return cls(config.log_every, config.score_every, config.checkpoint_every, config.steps, end)

    def checkpoint(self, step: int) -> bool:
        return step % self.checkpoint_every == 0 or step == self.end

    def log(self, step: int) -> bool:
        """Every ``log_every`` steps, and before every checkpoint (a resumed log has no gap)."""
        return step % self.log_every == 0 or self.checkpoint(step)

    def score(self, step: int) -> bool:
        return step % self.score_every == 0 or step == self.steps


def read_log(path: Path) -> pd.DataFrame:
    """A run's score log, its page checksums and content digest checked (``attngeom.record_files``)."""
    frame = read_parquet(path).to_pandas()
    if "step" not in frame.columns:
        raise DamagedRecord(f"{path}: no step column (it has {list(frame.columns)[:8]}); {AGAIN}")
    return frame


def read_score_log(path: Path) -> pd.DataFrame:
    """A run's score log, checked as ``read_log`` checks it and against the records' schema (its rows are
    ``attngeom.score``'s, with ``step``)."""
    frame = read_log(path)
    return conform(pa.Table.from_pandas(frame, preserve_index=False), str(path)).to_pandas()


def read_loss_log(path: Path) -> pd.DataFrame:
    """A run's loss log, checked as ``read_log`` checks it and for one row per step, 1, 2, 3, … in order:
    a step twice, out of order or missing is damage (a log joined from two runs, rows lost)."""
    frame = read_log(path)
    steps = frame["step"].to_numpy()
    expected = np.arange(1, len(steps) + 1)
    if len(steps) and not np.array_equal(steps, expected):
        at = int(np.flatnonzero(steps != expected)[0])
        before = f"after step {steps[at - 1]}" if at else "first"
        what = (
            "twice"
            if steps[at] in steps[:at]
            else "out of order"
            if at and steps[at] < steps[at - 1]
            else "where a step is missing"
        )
        raise DamagedRecord(
            f"{path}: step {steps[at]} comes {before}, {what}; one row per step is written; {AGAIN}"
        )
    return frame


class ParquetLog:
    """A run's log: the rows on disk up to step ``keep_through`` (where a resumed run takes over), then
    every appended frame."""

    read = staticmethod(read_log)

    def __init__(self, path: Path, keep_through: int):
        self.path = path
        self.frames: list[pd.DataFrame] = []
        if path.exists():
            frame = self.read(path)
            self.frames.append(frame[frame["step"] <= keep_through])

    def append(self, frame: pd.DataFrame, write: bool = True) -> None:
        """Add rows; ``write=False`` keeps them in memory until the next write (rewriting a 150,000-row
        loss log at every log interval cost a long run ~10% of its updates' time)."""
        self.frames.append(frame)
        if write:
            self.write()

    def write(self) -> None:
        self.frames = [pd.concat(self.frames, ignore_index=True)]
        write_parquet(pa.Table.from_pandas(self.frames[0], preserve_index=False), self.path)


def other_scoring_code(scores: pd.DataFrame, current: str) -> pd.Series:
    """Which rows of a score log other scoring code computed than ``current`` (each row's ``code_hash``,
    ``attngeom.provenance``); a log without the column, from an earlier attngeom, is all other code."""
    if "code_hash" not in scores.columns:
        return pd.Series(True, index=scores.index)
    return scores["code_hash"] != current


@dataclass(frozen=True)
class StepRecord:
    """One optimizer step as the loop saw it; the tensors stay on the device until the log is flushed."""

    step: int
    loss: torch.Tensor
    lm_loss: torch.Tensor
    grad_norm: torch.Tensor
    lr: float
    elapsed_s: float
    update_tokens: int
    """Tokens the update trained on (padding not counted)."""
    update_documents: int | None = None
    """Documents in the update, where it is counted in documents (``batch_documents``)."""


def progress_line(step: int, steps: int, loss: float, tokens_per_s: float, seconds_per_step: float) -> str:
    """One line of a run's progress for a log file (a job log has no progress bar): the step, the loss,
    the throughput and the time left at this pace."""
    eta = round(seconds_per_step * (steps - step))
    hours, rest = divmod(eta, 3600)
    return (
        f"step {step}/{steps}  loss {loss:.4f}  {tokens_per_s:,.0f} tokens/s  "
        f"ETA {hours}:{rest // 60:02d}:{rest % 60:02d}"
    )


def progress_since(step: int, steps: int, loss: float, tokens: int, seconds: float, first: int) -> str:
    """``progress_line`` at the pace of the steps since ``first``, which trained ``tokens`` in ``seconds``."""
    rate = tokens / seconds if seconds > 0 else math.inf
    return progress_line(step, steps, loss, rate, seconds / (step - first))


class LossLog(ParquetLog):
    """One row per optimizer step: loss, LM loss, gradient norm, learning rate, the update's size in tokens
    (and documents, where counted), tokens seen so far, wall time.

    Steps are recorded as device tensors and turned into rows by ``flush``: one device sync per log
    interval, not one per step.
    """

    read = staticmethod(read_loss_log)

    def __init__(self, path: Path, keep_through: int):
        super().__init__(path, keep_through)
        kept = self.frames[0] if self.frames else None
        self.tokens = int(kept["tokens"].iloc[-1]) if kept is not None and len(kept) else 0
        self.pending: list[StepRecord] = []

    def record(self, step: StepRecord) -> None:
        self.pending.append(step)

    def flush(self, clock: Callable[[], float], write: bool) -> float:
        """Turn the pending steps into rows, written to the file if ``write`` (at checkpoints) or if the
        loss diverged; returns the last loss. ``elapsed_s`` is the time a step was queued, except on the
        last row, where ``clock`` is read after the sync (so differences between log steps are true
        wall-clock durations)."""
        records, self.pending = self.pending, []
        values = torch.stack([torch.stack([r.loss, r.lm_loss, r.grad_norm.float()]) for r in records])
        values = values.double().cpu().numpy()
        frame = pd.DataFrame(
            {
                "step": [r.step for r in records],
                "loss": values[:, 0],
                "lm_loss": values[:, 1],
                "grad_norm": values[:, 2],
                "lr": [r.lr for r in records],
                "update_tokens": [r.update_tokens for r in records],
                "update_documents": pd.array([r.update_documents for r in records], dtype="Int64"),
                "tokens": self.tokens + np.cumsum([r.update_tokens for r in records]),
                "elapsed_s": [r.elapsed_s for r in records[:-1]] + [clock()],
            }
        )
        self.tokens = int(frame["tokens"].iloc[-1])
        last = float(frame["loss"].iloc[-1])
        self.append(frame, write=write or not math.isfinite(last))
        if not math.isfinite(last):
            raise Diverged(
                f"training loss became {last} at step {records[-1].step}: the run diverged; lower lr or "
                "grad_clip, or raise warmup_steps (the run folder keeps its last checkpoint)"
            )
        return last
