"""Properties of Table 1's speed-up over random loss logs (hypothesis): a run against itself is 0 (and so
is the signed speed-up, which flips its sign when the runs swap), a run that is never worse is never
slower, and the value is bounded, by either rule and any smoothing window."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from attngeom.runstats.speedup import RULES, signed_speedup, speedup


@st.composite
def loss_logs(draw) -> pd.DataFrame:
    """A loss log: increasing steps (from ≥ 1, uneven spacing) and losses that are either arbitrary
    values or a realistic curve (fast descent, then a plateau with noise up to σ = 0.5)."""
    n = draw(st.integers(2, 400))
    gaps = draw(st.lists(st.integers(1, 50), min_size=n, max_size=n))
    steps = np.cumsum(gaps)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):
        loss = rng.uniform(0, 20, n)
    else:
        start, floor = draw(st.floats(3, 12)), draw(st.floats(0.5, 3))
        rate = draw(st.floats(1e-4, 0.5)) / max(1, steps[-1] / n)
        loss = floor + (start - floor) * np.exp(-rate * steps) + rng.normal(0, draw(st.floats(0, 0.5)), n)
    return pd.DataFrame({"step": steps, "loss": loss})


windows = st.one_of(st.none(), st.integers(1, 50))
rules = st.sampled_from(RULES)


@settings(max_examples=200, deadline=None)
@given(loss_logs(), windows, rules)
def test_a_run_against_itself_is_zero(log, window, rule):
    assert speedup(log, log, window=window, rule=rule) == 0.0
    assert signed_speedup(log, log, window=window, rule=rule) == 0.0  # the test's statistic too
    assert speedup(log, log.sample(frac=1, random_state=0), window=window, rule=rule) == 0.0  # row order


@settings(max_examples=100, deadline=None)
@given(loss_logs(), st.integers(1, 399), windows, rules)
def test_a_run_against_its_own_first_part_is_zero(log, keep, window, rule):
    """A run stopped early (at a deadline) is compared with the other up to the step both reached."""
    part = log.iloc[: max(2, keep % len(log) + 1)]
    assert speedup(log, part, window=window, rule=rule) == 0.0
    assert speedup(part, log, window=window, rule=rule) == 0.0


@settings(max_examples=100, deadline=None)
@given(loss_logs(), st.data(), windows, rules)
def test_a_run_never_worse_is_never_slower(log, data, window, rule):
    lower = data.draw(st.lists(st.floats(0, 5), min_size=len(log), max_size=len(log)))
    better = log.assign(loss=log["loss"] - np.asarray(lower))
    assert speedup(log, better, window=window, rule=rule) >= 0.0
    assert speedup(better, log, window=window, rule=rule) <= 0.0


@settings(max_examples=100, deadline=None)
@given(loss_logs(), loss_logs(), windows, rules)
def test_the_speedup_is_a_percentage_of_the_steps_compared(a, b, window, rule):
    assume(a["step"].min() <= b["step"].max() and b["step"].min() <= a["step"].max())
    assert -100.0 < speedup(a, b, window=window, rule=rule) < 100.0


def test_logs_that_share_no_steps_are_refused():
    early = pd.DataFrame({"step": [1, 2, 3], "loss": [3.0, 2.0, 1.0]})
    with pytest.raises(ValueError, match="share no steps"):
        speedup(early, early.assign(step=early["step"] + 10))


@settings(max_examples=100, deadline=None)
@given(loss_logs(), loss_logs(), windows, rules)
def test_the_signed_speedup_flips_its_sign_when_the_runs_swap(a, b, window, rule):
    """What makes its expectation 0 when the init makes no difference (Table 1's test)."""
    assume(a["step"].min() <= b["step"].max() and b["step"].min() <= a["step"].max())
    assert signed_speedup(a, b, window=window, rule=rule) == -signed_speedup(b, a, window=window, rule=rule)
