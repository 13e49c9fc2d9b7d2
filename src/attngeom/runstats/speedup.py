"""The speed-up of one run over another, timed on their loss logs (one seed pair of Table 1).

**The paper's speed-up** (Table 1's caption): (T − t_candidate) / T, T the total number of steps and
t_candidate the first step at which the candidate (symmetric) run reaches the reference (random) run's
final loss. It assumes the reference run itself first reaches its final loss at its last step: true of a
smooth decreasing curve, false on a noisy plateau, where the first dip below the final value already
counts, so a run measured against itself scores up to ~60%. It is given under its own name
(``paper_speedup``), beside two rules that time both runs alike: speed-up = (t_reference − t_candidate) /
T, t the step at which a run's smoothed loss reaches the reference run's final smoothed loss, ``first`` =
the first step at or below it, ``robust`` = the first step after which it stays at or below it. Where the
reference run first reaches its final loss at its last step ``first`` is the paper's number; a run against
itself gives 0 under both rules for any log. Claims use ``robust``: one lucky stretch of batches cannot
make it. (The authors' notebook computes the paper's formula on unsmoothed 200-update means, with a
quirk of its own: ``authors.notebook_speedup``.)

**Censoring.** A candidate run that never reaches the target by the last step compared is censored: its
time is "> T", and its speed-up is at most the value shown (the one it would have, had it reached the
target at the last step). The table counts censored pairs; the signed speed-up does not lose them.

Losses are smoothed first (a trailing mean over 2% of the log); two logs of different lengths are
compared up to the last step both reached (a run stopped early, say at a deadline).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd

from .smoothing import SMOOTHING_FRACTION, smoothed

Rule = Literal["first", "robust"]
RULES: tuple[Rule, ...] = ("first", "robust")
CLAIM_RULE: Rule = "robust"
"""The rule the tests, the ``verdict`` column and any claim made from the table use."""

GAP_UPDATES = 2_000
"""The loss gap at a horizon T is the mean difference over the log points in (T − 2,000, T]: ten of the
authors' logged 200-update means, 2,000 of our per-update losses (a fifth of a log shorter than 10,000)."""


def reaches(smooth: pd.DataFrame, target: float, rule: Rule) -> int | None:
    """The step at which a smoothed log reaches ``target`` by ``rule``; None if it never does."""
    below = smooth["loss"].to_numpy() <= target
    steps = smooth["step"].to_numpy()
    if rule == "first":
        hits = np.flatnonzero(below)
        return int(steps[hits[0]]) if len(hits) else None
    if rule == "robust":
        if not below[-1]:
            return None
        above = np.flatnonzero(~below)
        return int(steps[above[-1] + 1]) if len(above) else int(steps[0])
    raise ValueError(f"speed-up rule {rule!r}: choose one of {RULES}")


def common_horizon(reference: pd.DataFrame, candidate: pd.DataFrame) -> int:
    """The last step both logs reached."""
    return min(int(reference["step"].max()), int(candidate["step"].max()))


def _times(
    reference: pd.DataFrame, candidate: pd.DataFrame, window: int | None, rule: Rule
) -> tuple[int, int | None, int]:
    """(t_reference, t_candidate or None if censored, horizon) by ``rule``, up to the last common step."""
    horizon = common_horizon(reference, candidate)
    reference, candidate = (log[log["step"] <= horizon] for log in (reference, candidate))
    if reference.empty or candidate.empty:
        raise ValueError(
            f"the two loss logs share no steps (one ends at step {horizon} before the other starts)"
        )
    window = window or max(1, round(SMOOTHING_FRACTION * len(reference)))
    ref, cand = smoothed(reference, window), smoothed(candidate, window)
    target = ref["loss"].iloc[-1]
    return reaches(ref, target, rule), reaches(cand, target, rule), horizon


def speedup(
    reference: pd.DataFrame, candidate: pd.DataFrame, window: int | None = None, rule: Rule = "first"
) -> float:
    """Speed-up in percent of ``candidate`` over ``reference`` (any two loss logs: the second is timed
    against the first's final loss), up to the last step both logs reached; a censored run (``censored``)
    is counted as reaching the target at the last step, so the value is an upper bound."""
    t_reference, t_candidate, horizon = _times(reference, candidate, window, rule)
    return 100.0 * (t_reference - (horizon if t_candidate is None else t_candidate)) / horizon


def censored(
    reference: pd.DataFrame, candidate: pd.DataFrame, window: int | None = None, rule: Rule = "first"
) -> bool:
    """Whether ``candidate`` never reaches ``reference``'s final loss by the last common step ("> T")."""
    return _times(reference, candidate, window, rule)[1] is None


def paper_speedup(reference: pd.DataFrame, candidate: pd.DataFrame, window: int | None = None) -> float:
    """The paper's formula, in percent: (T − t_candidate) / T, t_candidate the first step at which the
    smoothed candidate log reaches the reference one's final loss (T if never: censored, 0)."""
    _, t_candidate, horizon = _times(reference, candidate, window, "first")
    return 100.0 * (horizon - (horizon if t_candidate is None else t_candidate)) / horizon


def signed_speedup(
    reference: pd.DataFrame, candidate: pd.DataFrame, window: int | None = None, rule: Rule = CLAIM_RULE
) -> float:
    """The tests' statistic: the speed-up of ``candidate`` over ``reference`` minus that of ``reference``
    over ``candidate``, each taken where positive (a censored or slower run gains nothing, rather than an
    upper bound that depends on when the other run flattened out). Swapping the runs flips its sign, so it
    is 0 in expectation when they are exchangeable; a slower candidate, censored one way, registers the
    other way."""
    forward, backward = (
        speedup(reference, candidate, window, rule),
        speedup(candidate, reference, window, rule),
    )
    return max(forward, 0.0) - max(backward, 0.0)


def final_loss(loss: pd.DataFrame) -> float:
    return float(smoothed(loss)["loss"].iloc[-1])


def loss_gap(reference: pd.DataFrame, candidate: pd.DataFrame, horizon: int | None = None) -> float:
    """Candidate minus reference loss (nats), each the mean of its log points in (T − w, T], T the
    ``horizon`` (default: the last step both logs reached), w ``GAP_UPDATES`` or a fifth of T if less."""
    horizon = common_horizon(reference, candidate) if horizon is None else horizon
    width = min(GAP_UPDATES, horizon / 5)

    def mean(log: pd.DataFrame) -> float:
        near = log[(log["step"] > horizon - width) & (log["step"] <= horizon)]
        if near.empty:
            raise ValueError(f"a loss log has no point in the {width:g} updates up to step {horizon}")
        return float(near["loss"].mean())

    return mean(candidate) - mean(reference)
