"""Mean and 95% interval over seeds: the Student t-interval, mean ± t₀.₉₇₅(n−1) · s / √n.

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

LEVEL = 0.95

T_975 = (
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
    2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
    2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423,
)  # fmt: skip
"""The 0.975 quantile of Student's t with 1, 2, …, 30 degrees of freedom."""

NO_INTERVAL = "one seed: no interval"


def t_975(df: int) -> float:
    """The 0.975 quantile of Student's t: the table up to 30 degrees of freedom, then the Cornish–Fisher
    expansion around the normal quantile (off by less than 1e-4 from df 30 on)."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959963984540054
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
    )
    return z + sum(term / df ** (i + 1) for i, term in enumerate(terms))


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
