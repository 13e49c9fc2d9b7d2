"""Table 1's tests over seeds, from ``scipy.stats``: the two-sided one-sample Student t-test with its
minimum detectable effect (MDE) at 80% power, and two tests that do not rest on normality, the exact
paired sign-flip (permutation) test and the Wilcoxon signed-rank test; alpha 0.05.

**What is tested.** Per seed s, a paired difference d_s, 0 in expectation when the init makes no
difference: Table 1 uses the signed speed-up (``speedup.signed_speedup``: how much sooner the candidate run
reaches the reference run's final loss, minus how much sooner the reference reaches the candidate's). It
is antisymmetric by construction (swapping the two runs flips its sign), so when the two runs of a seed are
exchangeable d_s is symmetric about 0: the null value is 0 without estimating it from other pairs.

**The tests and what they assume.** Seeds are independent in all three.
- *t-test*: d is roughly normal (exact for normal d, close for the light-tailed values seen here;
  ``tests/test_table1_power.py`` simulates it). With n seeds it has n − 1 degrees of freedom; with one seed
  there is no test.
- *Sign-flip test* (exact): only that d_s is symmetric about 0 under the null. Its null distribution is the
  mean of d over all 2ⁿ sign assignments; the p-value is the share of them whose |mean| reaches the
  observed one. It can never be below ``least_exact_p(n)`` = 2/2ⁿ: with 5 seeds 0.0625, so at alpha 0.05
  it needs 6 seeds or more to say anything.
- *Wilcoxon signed-rank test* (exact, zero differences dropped): the same symmetry; ranks instead of
  values, so one large seed cannot carry it. The same floor 2/2ⁿ (n the non-zero differences).

**MDE.** The smallest true mean of d that the t-test detects with 80% probability given the observed
between-seed standard deviation and the number of seeds (the non-central t): a row that is "not
distinguishable" excludes effects of that size or larger, 4 times in 5.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
POWER = 0.8
EXACT_UP_TO = 20
"""Seeds up to which the sign-flip test enumerates all 2ⁿ sign assignments; above, ``RANDOM_FLIPS``."""
RANDOM_FLIPS = 2**16
"""Seeded random sign assignments above ``EXACT_UP_TO`` seeds (the p-value then within ±0.004, 95%)."""


def t_test(values: np.ndarray) -> np.ndarray:
    """Two-sided p-value of the one-sample t-test of mean 0 along the last axis (one p per leading
    index; NaN with fewer than 2 values; 1 where every value is 0, 0 where all are equal and not 0)."""
    x = np.asarray(values, dtype=float)
    if x.shape[-1] < 2:
        return np.full(x.shape[:-1], np.nan)
    mean, sd = x.mean(axis=-1), x.std(axis=-1, ddof=1)
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # rows without spread: their p is set below
        p = stats.ttest_1samp(x, 0.0, axis=-1).pvalue
    return np.where(sd > 0, p, np.where(mean == 0, 1.0, 0.0))


def least_exact_p(n: int) -> float:
    """The smallest two-sided p-value an exact sign-flip or signed-rank test can give with n pairs."""
    return min(1.0, 2.0 / 2**n)


def sign_flip_test(values: np.ndarray) -> float:
    """Two-sided p-value of the paired sign-flip test of mean 0: exact (all 2ⁿ sign flips) up to
    ``EXACT_UP_TO`` values, else over ``RANDOM_FLIPS`` seeded random flips; NaN with fewer than 2 values."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return math.nan
    if not np.any(x):
        return 1.0
    exact = len(x) <= EXACT_UP_TO
    result = stats.permutation_test(
        (x,),
        np.mean,
        permutation_type="samples",
        n_resamples=np.inf if exact else RANDOM_FLIPS,
        alternative="two-sided",
        random_state=None if exact else np.random.default_rng(0),
    )
    return float(result.pvalue)


def wilcoxon_test(values: np.ndarray) -> float:
    """Two-sided p-value of the exact Wilcoxon signed-rank test of a distribution symmetric about 0, zero
    differences dropped first ("wilcox"); NaN with fewer than 2 values, 1 when all are 0."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return math.nan
    nonzero = x[x != 0]
    if len(nonzero) == 0:
        return 1.0
    return float(stats.wilcoxon(nonzero, method="exact").pvalue)


def power(effect_in_sd: float, n: int) -> float:
    """Probability that the two-sided t-test at ``ALPHA`` rejects with n seeds when the true mean is
    ``effect_in_sd`` between-seed standard deviations (the non-central t with n − 1 degrees of freedom)."""
    if n < 2:
        return math.nan
    df, ncp = n - 1, effect_in_sd * math.sqrt(n)
    critical = stats.t.ppf(1 - ALPHA / 2, df)
    # the lower tail P(T' ≤ −c) as P(T'' ≥ c) for −ncp: scipy's nct.cdf gives NaN far out in that tail
    return float(stats.nct.sf(critical, df, ncp) + stats.nct.sf(critical, df, -ncp))


def minimum_detectable_effect(sd: float, n: int, target: float = POWER) -> float:
    """The true mean (in the units of ``sd``) that the test detects with probability ``target`` given
    the between-seed standard deviation ``sd`` and n seeds; NaN with fewer than 2 seeds or no spread."""
    if n < 2 or not math.isfinite(sd) or sd <= 0:  # no spread measured: no effect size follows
        return math.nan
    high = 1.0
    while power(high, n) < target:
        high *= 2
    return optimize.brentq(lambda effect: power(effect, n) - target, 0.0, high, xtol=1e-10) * sd


def seeds_needed(effect: float, sd: float, target: float = POWER, most: int = 1000) -> int | None:
    """The fewest seeds with which an effect of ``effect`` (units of ``sd``) is detected with
    probability ``target``; None if more than ``most``."""
    return next((n for n in range(2, most + 1) if power(effect / sd, n) >= target), None)
