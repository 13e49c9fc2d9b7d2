"""The loss smoothing that Table 1, Figure S5 and the plateau detection share: a trailing mean."""

from __future__ import annotations

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

SMOOTHING_FRACTION = 0.02


def smoothed(loss: pd.DataFrame, window: int | None = None) -> pd.DataFrame:
    """The loss log sorted by step, ``loss`` replaced by its trailing mean over ``window`` rows (default
    2% of the log; fewer at the start). Each mean is summed on its own, in the same order for every log,
    so a log that is nowhere higher than another is nowhere higher once smoothed, to the last bit."""
    frame = loss.sort_values("step", kind="stable").reset_index(drop=True)
    window = window or max(1, round(SMOOTHING_FRACTION * len(frame)))
    values = np.concatenate([np.zeros(window - 1), frame["loss"].to_numpy(dtype=float)])
    sums = sliding_window_view(values, window).sum(axis=1)
    return frame.assign(loss=sums / np.minimum(np.arange(1, len(frame) + 1), window))
