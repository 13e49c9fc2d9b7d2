"""Table 1's tests (attngeom.runstats.significance) against computations that do not go through scipy: the
t-test's p against Student's density integrated numerically, the sign-flip and Wilcoxon p-values against a
brute-force enumeration of all 2ⁿ sign assignments, and the exact tests' error rate under a heavy-tailed
symmetric null (where normality fails)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from attngeom.runstats.significance import (
    ALPHA,
    least_exact_p,
    sign_flip_test,
    t_test,
    wilcoxon_test,
)


def signs(n: int) -> np.ndarray:
    """Every assignment of ±1 to n values, one per row (2ⁿ rows)."""
    return np.array(list(itertools.product((-1.0, 1.0), repeat=n)))


def brute_sign_flip(x: np.ndarray) -> float:
    """P(|mean of the sign-flipped values| ≥ |observed mean|) over all 2ⁿ flips."""
    means = (signs(len(x)) * x).mean(axis=1)
    return float(np.mean(np.abs(means) >= abs(x.mean()) * (1 - 1e-12)))


def brute_wilcoxon(x: np.ndarray) -> float:
    """Two-sided exact signed-rank p: zeros dropped, W⁺ the sum of the ranks of |x| of the positive
    values; P(|W⁺ − E W⁺| ≥ |observed − E W⁺|) over all 2ⁿ sign assignments of the ranks."""
    x = x[x != 0]
    ranks = np.argsort(np.argsort(np.abs(x))) + 1.0  # no ties in these samples
    w = ranks[x > 0].sum()
    centre = len(x) * (len(x) + 1) / 4
    all_w = ((signs(len(x)) > 0) * ranks).sum(axis=1)
    return float(np.mean(np.abs(all_w - centre) >= abs(w - centre) - 1e-9))


def student_two_sided(t: float, df: int) -> float:
    grid = np.linspace(0, abs(t), 200_001)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = np.exp(log_c - (df + 1) / 2 * np.log1p(grid**2 / df))
    return 1 - 2 * float(np.sum((density[1:] + density[:-1]) / 2) * (grid[1] - grid[0]))


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_the_t_test_p_is_students_two_sided_tail(n):
    x = np.random.default_rng(n).normal(0.8, 1.0, n)
    t = x.mean() / (x.std(ddof=1) / math.sqrt(n))
    assert float(t_test(x)) == pytest.approx(student_two_sided(t, n - 1), abs=1e-6)
    assert np.isnan(t_test(np.zeros((4, 1)))).all() and t_test(np.zeros(3)) == 1.0
    assert t_test(np.full(3, 2.0)) == 0.0  # equal and not 0: no spread, certain


@pytest.mark.parametrize("n", range(2, 11))
def test_the_sign_flip_p_is_the_enumerated_one(n):
    rng = np.random.default_rng(100 + n)
    for x in (rng.normal(0.5, 1.0, n), rng.standard_cauchy(n), np.r_[np.zeros(1), rng.normal(1, 1, n - 1)]):
        assert sign_flip_test(x) == pytest.approx(brute_sign_flip(x), abs=1e-12)


@pytest.mark.parametrize("n", range(2, 11))
def test_the_wilcoxon_p_is_the_enumerated_one(n):
    rng = np.random.default_rng(200 + n)
    for x in (rng.normal(0.5, 1.0, n), rng.standard_cauchy(n), np.r_[np.zeros(1), rng.normal(1, 1, n - 1)]):
        if np.count_nonzero(x) >= 1:
            assert wilcoxon_test(x) == pytest.approx(brute_wilcoxon(x), abs=1e-12)


def test_an_exact_test_cannot_go_below_two_in_two_to_the_n():
    assert least_exact_p(5) == 0.0625 and least_exact_p(6) == 0.03125
    for n in (3, 5, 6):
        all_positive = np.arange(1.0, n + 1)
        assert sign_flip_test(all_positive) == pytest.approx(least_exact_p(n))
        assert wilcoxon_test(all_positive) == pytest.approx(least_exact_p(n))
    assert sign_flip_test(np.arange(1.0, 6)) > ALPHA  # 5 seeds, all one way: still no verdict at 0.05
    assert sign_flip_test(np.arange(1.0, 7)) < ALPHA
    assert math.isnan(sign_flip_test(np.ones(1))) and sign_flip_test(np.zeros(4)) == 1.0
    assert math.isnan(wilcoxon_test(np.ones(1))) and wilcoxon_test(np.zeros(4)) == 1.0


def test_the_exact_tests_keep_alpha_under_a_heavy_tailed_symmetric_null():
    """Cauchy differences (no mean, far from normal): the exact tests reject at most alpha of the time."""
    rng = np.random.default_rng(5)
    samples = rng.standard_cauchy((1500, 8))
    for test in (sign_flip_test, wilcoxon_test):
        rate = np.mean([test(x) < ALPHA for x in samples])
        assert 0.02 <= rate <= ALPHA + 0.012, (test.__name__, rate)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_the_prediction_interval_holds_one_new_seed_95_percent_of_the_time(n):
    """Simulated: n seeds, then one more from the same normal population; the prediction interval holds
    it 95% of the time, the mean's confidence interval much less often (why claims size a single run of
    the authors' against the former)."""
    from attngeom.runstats.intervals import mean_interval, prediction_interval

    rng = np.random.default_rng(n)
    draws = rng.normal(3.0, 2.0, size=(4_000, n + 1))
    inside_prediction = inside_mean = 0
    for row in draws:
        new = row[-1]
        p, m = prediction_interval(row[:-1]), mean_interval(row[:-1])
        inside_prediction += p.low <= new <= p.high
        inside_mean += m.low <= new <= m.high
    assert inside_prediction / len(draws) == pytest.approx(0.95, abs=0.012)  # 3.5 standard errors
    assert inside_mean < inside_prediction - 0.025 * len(draws)  # too narrow for a single new run
    assert prediction_interval([1.0]).n == 1 and math.isnan(prediction_interval([1.0]).low)
