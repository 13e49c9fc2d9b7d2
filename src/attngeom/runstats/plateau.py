"""Where a run leaves the masked-LM loss plateau, read from its own loss log (captions and Table 1 quote
it instead of a constant).

An encoder's MLM loss falls fast to about the unigram entropy, creeps down there while attention learns
nothing useful, then falls again. On the log smoothed over ``WINDOW`` of its length: the plateau starts
where the first fall has slowed to ``SLOW`` of its steepest rate, at the plateau's loss P; the run has left
it at the first later step at which the loss is ``DROP`` of the way from P down to the final loss. A run
whose loss ends less than ``LEAST`` nats below P never left it (None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and pandas only where a log is read: the workflow's DAG imports the constants
    import pandas as pd

GPU_ENCODER_EXITS = (802, 862)
"""Earliest and latest step at which the committed GPU BERT-mini encoders (random init, 3 seeds, lr 1e-3,
batch 64 × 256 tokens, document masking: benchmarks/results/training_repro_seeds/) left the plateau, by
``plateau_exit`` on their own logs (tests/test_report_captions.py recomputes it). Captions, written before
any run exists, quote these; each run's own exit step is in Table 1 ("leaves plateau")."""
SMOKE_TEST_STEPS = GPU_ENCODER_EXITS[1]
"""Runs shorter than the latest of those exits are smoke tests of the machinery: too short to show the
training effects, and their trained models' scores say nothing about the paper's claims."""

WINDOW = 0.05
SLOW = 0.05
DROP = 0.25
LEAST = 1.0


def plateau_exit(loss: pd.DataFrame) -> int | None:
    """The step at which the run's smoothed loss has left its plateau; None if it never does."""
    import numpy as np

    from .smoothing import smoothed

    if len(loss) < 8:
        return None
    smooth = smoothed(loss, max(2, round(WINDOW * len(loss))))
    steps, values = smooth["step"].to_numpy(dtype=float), smooth["loss"].to_numpy()
    slope = -np.gradient(values, steps)
    steepest = int(np.argmax(slope))
    slowed = np.flatnonzero(slope[steepest:] <= SLOW * slope[steepest])
    if not len(slowed):
        return None
    start = steepest + int(slowed[0])
    level, final = values[start], values[-1]
    if level - final < LEAST:
        return None
    left = np.flatnonzero(values[start:] <= level - DROP * (level - final))
    return int(steps[start + left[0]])
