"""Table 1's test: a two-sided one-sample Student t-test over seeds, its p-value and the minimum
detectable effect (MDE) at 80% power, at alpha 0.05.

**What is tested.** Per seed s, the signed speed-up d_s = max(0, speedup(random_s → symmetric_s)) −
max(0, speedup(symmetric_s → random_s)): how much sooner the symmetric run reaches the random run's final
loss, minus how much sooner the random run reaches the symmetric run's (``speedup.signed_speedup``). It is antisymmetric by construction
(swapping the two runs flips its sign; a run against itself gives 0), so when the init makes no difference
the two runs of a seed are exchangeable and d_s is symmetric about 0: the null value is 0 without having
to estimate it from random-vs-random pairs. A slower symmetric run, which never reaches the random run's
final loss (censored: "> T"), still registers: as the random run's speed-up over it. The test asks whether
the mean of d over seeds differs from 0.

**Assumptions.** Seeds are independent; d_s is roughly normal (the t-test is exact for normal d and close
to it for the symmetric, light-tailed values seen here; ``tests/test_table1_power.py`` simulates it). With n
seeds the test has n − 1 degrees of freedom: with 2 seeds |t| must exceed 12.7, with 3 seeds 4.3; with
one seed there is no test.

**MDE.** The smallest true mean of d that the test detects with 80% probability, from the observed
between-seed standard deviation and the number of seeds (power of the noncentral t, integrated
numerically): a row that is "not distinguishable" excludes effects of that size or larger, 4 times in 5.
"""

from __future__ import annotations

import math

import numpy as np

from .intervals import t_975

ALPHA = 0.05
POWER = 0.8


def t_sf2(t: np.ndarray, df: int) -> np.ndarray:
    """Two-sided tail probability P(|T| ≥ |t|) of Student's t with integer ``df`` (the finite series of
    Abramowitz & Stegun 26.7.3–4), element-wise."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} < 1")
    theta = np.arctan(np.abs(np.asarray(t, dtype=float)) / math.sqrt(df))
    c2, s = np.cos(theta) ** 2, np.sin(theta)
    if df % 2:  # odd: A = 2/π (θ + sinθ cosθ (1 + 2/3 cos²θ + … ))
        series, term = np.zeros_like(theta), np.ones_like(theta)
        for k in range(1, (df - 1) // 2 + 1):
            series += term
            term = term * c2 * (2 * k) / (2 * k + 1)
        inside = 2 / math.pi * (theta + s * np.cos(theta) * series) if df > 1 else 2 / math.pi * theta
    else:  # even: A = sinθ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + …)
        series, term = np.zeros_like(theta), np.ones_like(theta)
        for k in range(1, df // 2 + 1):
            series += term
            term = term * c2 * (2 * k - 1) / (2 * k)
        inside = s * series
    return np.clip(1.0 - inside, 0.0, 1.0)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    """Φ(z) element-wise, by Abramowitz & Stegun 7.1.26 for erf (absolute error < 1.5e-7)."""
    x = np.abs(np.asarray(z, dtype=float)) / math.sqrt(2)
    t = 1 / (1 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    half_erfc = 0.5 * poly * np.exp(-(x**2))
    return np.where(np.asarray(z) >= 0, 1 - half_erfc, half_erfc)


def t_test(values: np.ndarray) -> np.ndarray:
    """Two-sided p-value of the one-sample t-test of mean 0 along the last axis (one p per leading
    index; NaN with fewer than 2 values; 1 where every value is 0, 0 where all are equal and not 0)."""
    x = np.asarray(values, dtype=float)
    n = x.shape[-1]
    if n < 2:
        return np.full(x.shape[:-1], np.nan)
    mean, sd = x.mean(axis=-1), x.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(sd > 0, mean / (sd / math.sqrt(n)), np.where(mean == 0, 0.0, np.inf))
    return t_sf2(t, n - 1)


def power(effect_in_sd: float, n: int) -> float:
    """Probability that the two-sided t-test at ``ALPHA`` rejects with n seeds when the true mean is
    ``effect_in_sd`` between-seed standard deviations: E over the sample variance of the normal tails,
    with the chi density of the sample standard deviation integrated on a fine grid."""
    if n < 2:
        return math.nan
    df, ncp = n - 1, effect_in_sd * math.sqrt(n)
    critical = t_975(df)
    u = np.linspace(0.0, math.sqrt(df) + 12, 4001)  # u² = df·s²/σ², chi-distributed with df
    log_density = (df - 1) * np.log(np.maximum(u, 1e-300)) - u**2 / 2
    scale = critical * u / math.sqrt(df)
    rejects = normal_cdf(ncp - scale) + normal_cdf(-ncp - scale)
    weights = np.exp(log_density)
    weights[[0, -1]] /= 2  # the trapezoid rule on an even grid, whose spacing cancels
    return float((rejects * weights).sum() / weights.sum())


def minimum_detectable_effect(sd: float, n: int, target: float = POWER) -> float:
    """The true mean (in the units of ``sd``) that the test detects with probability ``target`` given
    the between-seed standard deviation ``sd`` and n seeds; NaN with fewer than 2 seeds or no spread."""
    if n < 2 or not math.isfinite(sd) or sd <= 0:  # no spread measured: no effect size follows
        return math.nan
    low, high = 0.0, 1.0
    while power(high, n) < target:
        high *= 2
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if power(mid, n) < target else (low, mid)
    return high * sd


def seeds_needed(effect: float, sd: float, target: float = POWER, most: int = 1000) -> int | None:
    """The fewest seeds with which an effect of ``effect`` (units of ``sd``) is detected with
    probability ``target``; None if more than ``most``."""
    return next((n for n in range(2, most + 1) if power(effect / sd, n) >= target), None)
