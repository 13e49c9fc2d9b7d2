"""Mean and 95% interval over seeds: the Student t-interval, mean ± t₀.₉₇₅(n−1) · s / √n; and the 95%
prediction interval for one new seed, mean ± t₀.₉₇₅(n−1) · s · √(1 + 1/n), the yardstick for a single run
of someone else's (the authors' one seed): where one more seed of ours would fall, not where our mean is.

With the 2–3 seeds a training grid can afford, the interval is wide by construction: t₀.₉₇₅ is 12.71
for 2 seeds and 4.30 for 3, so the half-width is 9.0 and 2.5 sample standard deviations. A bootstrap
would look narrower only because it has 3 or 10 distinct resamples to draw from, not because it knows
more. With one seed there is no spread to estimate, and no interval is given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95

NO_INTERVAL = "one seed: no interval"


def t_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    return float(stats.t.ppf(0.975, df))


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds (or seed pairs) and its 95% t-interval; ``low``/``high`` NaN when n < 2."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def computable(self) -> bool:
        return self.n >= 2

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def columns(self, name: str) -> dict[str, float]:
        """A table's three columns for it: ``name`` (the mean), ``name_low`` and ``name_high``."""
        return {name: self.mean, f"{name}_low": self.low, f"{name}_high": self.high}

    def plus_minus(self, digits: int) -> str:
        """``3.541 ± 0.012``, or the mean and why there is no interval."""
        if not self.computable:
            return f"{self.mean:.{digits}f} ({NO_INTERVAL})" if self.n else ""
        return f"{self.mean:.{digits}f} ± {self.half_width:.{digits}f}"

    def bracketed(self, digits: int) -> str:
        """``8.5 [2.0, 15.0]``, or the mean and why there is no interval."""
        if not self.computable:
            return f"{self.mean:.{digits}f} ({NO_INTERVAL})" if self.n else ""
        return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def mean_interval(values: Iterable[float]) -> Interval:
    """The mean of ``values`` and its 95% t-interval (a point, no interval, for fewer than 2 values)."""
    x = np.asarray(list(values), dtype=float)
    if not np.isfinite(x).all():
        raise ValueError(f"non-finite value among {x.tolist()}")
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    half = t_975(n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def prediction_interval(values: Iterable[float]) -> Interval:
    """The mean of ``values`` and the 95% interval in which one new value from the same population falls
    (Student t, normal errors assumed; a point, no interval, for fewer than 2 values)."""
    mean = mean_interval(values)
    if not mean.computable:
        return mean
    widen = math.sqrt(mean.n + 1)  # s·√(1 + 1/n) over s/√n
    half = mean.half_width * widen
    return Interval(mean.mean, mean.mean - half, mean.mean + half, mean.n)
