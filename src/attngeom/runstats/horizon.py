"""How a speed-up changes with the horizon at which it is measured: does a faster start last?

Table 1 measures each comparison at one horizon T (the last update both runs made). Cutting the same two
loss logs at earlier horizons T′ < T, and the authors' logs at the same T′ up to their 200,000 updates,
says whether an init's advantage is a head start that closes (the loss gap shrinks *and* the speed-up, a
fraction of T′, falls towards 0) or one that lasts (the speed-up stays). Both are timed by the claim rule
on each cut (``speedup.speedup``, ``speedup.loss_gap``), so a point at T′ = T is Table 1's own.
``horizon_summary`` gives each init's mean over seeds at each T′ with its 95% interval and tests, so "is the
head start still there at T′" has an error rate, not only a curve per seed.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..training.config import TrainConfig
from ..training.inits import REFERENCE
from . import authors
from .intervals import mean_interval
from .pairing import twins
from .significance import sign_flip_test, t_test
from .speedup import CLAIM_RULE, GAP_UPDATES, loss_gap, speedup

POINTS = 24
"""Horizons per comparison, spaced evenly in log(T′)."""

COLUMNS = ("init", "layers", "objective", "characters", "seed", "horizon", "speedup", "loss_gap")
GROUP = ("init", "layers", "objective", "characters", "horizon")
SUMMARY_COLUMNS = (
    *GROUP,
    "seeds",
    "speedup",
    "speedup_low",
    "speedup_high",
    "loss_gap",
    "loss_gap_low",
    "loss_gap_high",
    "loss_gap_p_t",
    "loss_gap_p_sign_flip",
)


def horizons(last: int, first: int = 2 * GAP_UPDATES, points: int = POINTS) -> np.ndarray:
    """Horizons from ``first`` to ``last`` (both included), evenly spaced in log(T′), on whole updates."""
    if last <= first:
        return np.array([last])
    return np.unique(np.geomspace(first, last, points).round().astype(int))


def _cut(log: pd.DataFrame, horizon: int) -> pd.DataFrame:
    return log[log["step"] <= horizon]


def speedup_by_horizon(
    losses: Mapping[str, pd.DataFrame], configs: Mapping[str, TrainConfig]
) -> pd.DataFrame:
    """Every seed pair of an init against random (the same seed), cut at ``horizons`` up to the pair's
    common horizon: one row per init, pair and horizon, with the claim rule's speed-up (percent of the
    horizon) and the loss gap. Several arms (symmetry alone, init scale alone, both) side by side say
    which part of an init's head start lasts."""
    rows = []
    for twin in twins(configs):
        if twin.reference_init != REFERENCE or twin.candidate_init == REFERENCE:
            continue
        reference, candidate = losses[twin.reference], losses[twin.candidate]
        last = min(int(reference["step"].max()), int(candidate["step"].max()))
        config = configs[twin.candidate]
        for horizon in horizons(last):
            ref, cand = _cut(reference, horizon), _cut(candidate, horizon)
            rows.append(
                {
                    "init": twin.candidate_init,
                    "layers": config.n_layers,
                    "objective": config.objective,
                    "characters": config.character_spacing,
                    "seed": config.seed,
                    "horizon": int(horizon),
                    "speedup": speedup(ref, cand, rule=CLAIM_RULE),
                    "loss_gap": loss_gap(ref, cand),
                }
            )
    return pd.DataFrame(rows, columns=[*COLUMNS])


def horizon_summary(by_horizon: pd.DataFrame) -> pd.DataFrame:
    """``speedup_by_horizon``'s rows over seeds, per init, kind of run and horizon: the mean speed-up and
    loss gap with 95% t-intervals (none with one seed), and the loss gap's two-sided tests of 0, the
    t-test and the exact sign-flip test (which cannot go below 2/2ⁿ with n seeds). The loss gap is the
    tested quantity: it is paired and 0 in expectation when the init makes no difference, where the
    claim rule's speed-up is not antisymmetric (Table 1 tests the signed speed-up at T′ = T)."""
    rows = []
    for key, group in by_horizon.groupby(list(GROUP), sort=True):
        gaps = group["loss_gap"].to_numpy(dtype=float)
        rows.append(
            {
                **dict(zip(GROUP, key, strict=True)),
                "seeds": len(group),
                **mean_interval(group["speedup"]).columns("speedup"),
                **mean_interval(gaps).columns("loss_gap"),
                "loss_gap_p_t": float(t_test(gaps)),  # NaN, as the sign-flip test, with one seed
                "loss_gap_p_sign_flip": sign_flip_test(gaps),
            }
        )
    return pd.DataFrame(rows, columns=[*SUMMARY_COLUMNS])


def authors_by_horizon(logs: pd.DataFrame, layers: int, characters: bool) -> pd.DataFrame:
    """The authors' encoder runs of this depth and kind of text (``authors.counterparts``), their symmetric
    init against random cut at ``horizons`` up to 200,000 updates: dataset, horizon, speed-up, loss gap."""
    rows = []
    for dataset in authors.counterparts(layers, "encoder", "", characters):
        for horizon in horizons(int(logs["step"].max()), first=2 * GAP_UPDATES):
            found = authors.compare(logs, layers, dataset, int(horizon))
            rows.append(
                {
                    "dataset": dataset,
                    "horizon": found["steps"],
                    "speedup": found[f"speedup_{CLAIM_RULE}"],
                    "loss_gap": found["loss_gap"],
                }
            )
    return pd.DataFrame(rows, columns=["dataset", "horizon", "speedup", "loss_gap"])
