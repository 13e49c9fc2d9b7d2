"""When runs leave the masked-LM loss plateau, compared at one fixed loss (captions and Table 1 quote it
instead of a constant).

An encoder's MLM loss falls fast to about the unigram entropy, creeps down there while attention learns
nothing useful, then falls again. On each log smoothed over ``WINDOW`` of its length: the plateau starts
where the first fall has slowed to ``SLOW`` of its steepest rate, at the plateau's loss P; a run whose
loss ends less than ``LEAST`` nats below P never left it. Runs compared together (a row or a comparison
group of Table 1) share one **exit level** L = P̄ − ``DROP`` · (P̄ − F), P̄ the mean plateau loss of the runs
that left it and F the highest final loss among them: a fixed loss, the same for every run, so an earlier
exit means the same thing for each (a threshold relative to each run's own final loss would not). A run
exits at the first step its smoothed loss is at or below L; one that never gets there has no exit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and pandas only where a log is read: the workflow's DAG imports the constants
    import pandas as pd

GPU_ENCODER_EXITS = (824, 851)
"""Earliest and latest step at which the committed GPU BERT-mini encoders (random init, 3 seeds, lr 1e-3,
batch 64 × 256 tokens, document masking: benchmarks/results/training_repro_seeds/) reached their shared
exit level (``plateau_exits`` of the three logs; tests/test_report_captions.py recomputes it). Captions,
written before any run exists, quote these; each row's own exit steps are in Table 1 ("leaves plateau")."""
SMOKE_TEST_STEPS = GPU_ENCODER_EXITS[1]
"""Runs shorter than the latest of those exits are smoke tests of the machinery: too short to show the
training effects, and their trained models' scores say nothing about the paper's claims."""

WINDOW = 0.05
SLOW = 0.05
DROP = 0.25
LEAST = 1.0


def _smooth(loss: pd.DataFrame) -> pd.DataFrame:
    from .smoothing import smoothed

    return smoothed(loss, max(2, round(WINDOW * len(loss))))


def plateau(loss: pd.DataFrame) -> tuple[float, float] | None:
    """(plateau loss P, final loss) of a run's smoothed log; None if it never left the plateau (or the log
    has fewer than 8 points)."""
    import numpy as np

    if len(loss) < 8:
        return None
    smooth = _smooth(loss)
    steps, values = smooth["step"].to_numpy(dtype=float), smooth["loss"].to_numpy()
    slope = -np.gradient(values, steps)
    steepest = int(np.argmax(slope))
    slowed = np.flatnonzero(slope[steepest:] <= SLOW * slope[steepest])
    if not len(slowed):
        return None
    level, final = float(values[steepest + int(slowed[0])]), float(values[-1])
    return (level, final) if level - final >= LEAST else None


def exit_level(logs: Sequence[pd.DataFrame]) -> float | None:
    """The loss L at which ``logs`` are said to leave the plateau; None if none of them left it."""
    found = [p for p in map(plateau, logs) if p is not None]
    if not found:
        return None
    level = sum(p for p, _ in found) / len(found)
    return level - DROP * (level - max(f for _, f in found))


def reaches_level(loss: pd.DataFrame, level: float) -> int | None:
    """The first step at which the run's smoothed loss is at or below ``level``; None if never."""
    smooth = _smooth(loss)
    hits = smooth.loc[smooth["loss"] <= level, "step"]
    return int(hits.iloc[0]) if len(hits) else None


def plateau_exits(logs: Sequence[pd.DataFrame]) -> tuple[float | None, list[int | None]]:
    """(the shared exit level, each log's exit step or None)."""
    level = exit_level(logs)
    return level, [None if level is None else reaches_level(log, level) for log in logs]
