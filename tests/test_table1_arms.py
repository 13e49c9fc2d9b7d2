"""Table 1 over init arms (attngeom.runstats.table1): synthetic loss logs in which each arm is the random
run's curve run faster by a known factor, so every comparison's speed-up is known in advance; the tests,
the exact tests' floor and the decomposition rows come out as built."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attngeom.runstats.table1 import summarise
from attngeom.runstats.table1_display import paper_table1, table1_display
from attngeom.training.config import make_config

STEPS = np.arange(1, 1501) * 10  # T = 15,000
FASTER_BY = {"random": 0.0, "symmetric": 0.10, "torch_default": 0.05, "torch_default_symmetric": 0.30}
"""Each arm reaches any loss at (1 − this) times the step the random run does."""


def curve(faster_by: float, seed: int) -> pd.DataFrame:
    """A smooth decreasing loss, time-compressed by 1/(1 − ``faster_by``), with a seed's small jitter in
    time and noise in loss."""
    rng = np.random.default_rng(seed)
    stretch = (1 - faster_by) * np.exp(rng.normal(0, 0.01))
    loss = 2 + 8 * np.exp(-STEPS / (3000 * stretch)) + rng.normal(0, 0.002, len(STEPS))
    return pd.DataFrame({"step": STEPS, "loss": loss})


def arms(seeds: int) -> tuple[dict, dict]:
    losses, configs = {}, {}
    for seed in range(seeds):
        for i, (init, faster_by) in enumerate(FASTER_BY.items()):
            name = f"{init}-{seed}"
            losses[name] = curve(faster_by, 100 * seed + i)
            configs[name] = make_config({"dataset": "sotu", "n_layers": 4}, {"init": init, "seed": seed})
    return losses, configs


def expected(candidate: str, reference: str) -> float:
    """The speed-up (%) built in: the reference reaches its final loss at T, the candidate at
    T (1 − f_candidate) / (1 − f_reference)."""
    return 100 * (1 - (1 - FASTER_BY[candidate]) / (1 - FASTER_BY[reference]))


@pytest.fixture(scope="module")
def table():
    return summarise(*arms(6)).set_index(["init", "reference"])


@pytest.mark.parametrize(
    "candidate, reference",
    [
        ("symmetric", "random"),
        ("torch_default", "random"),
        ("torch_default_symmetric", "random"),
        ("torch_default_symmetric", "torch_default"),
    ],
)
def test_every_arm_gets_the_speedup_built_into_its_logs(table, candidate, reference):
    row = table.loc[candidate, reference]
    assert row["speedup_robust"] == pytest.approx(expected(candidate, reference), abs=1.0)
    assert row["speedup_robust_low"] <= expected(candidate, reference) <= row["speedup_robust_high"]
    assert row["seed_pairs"] == 6 and row["censored"] == 0
    assert row["verdict"] == "faster than seed noise (t-test)"
    assert row["signed_p_sign_flip"] == pytest.approx(2 / 2**6)  # every seed faster: the exact floor
    assert row["verdict_exact"] == "faster than seed noise (sign-flip test)"  # 6 seeds can reach 0.05
    assert row["loss_gap_high"] < 0  # a faster run is lower at T too


def test_the_decomposition_has_one_row_per_comparison_and_the_random_row_none(table):
    assert sorted(table.index) == [
        ("random", ""),
        ("symmetric", "random"),
        ("torch_default", "random"),
        ("torch_default_symmetric", "random"),
        ("torch_default_symmetric", "torch_default"),
    ]
    assert np.isnan(table.loc[("random", ""), "speedup_robust"])
    effects = table["effect"].to_dict()
    assert effects["torch_default_symmetric", "torch_default"] == "symmetry at the authors' scale"
    assert effects["torch_default", "random"] == "init scale alone (PyTorch's default q/k/v)"
    shown = table1_display(table.reset_index())
    assert shown["vs"].tolist() == ["", "random", "random", "random", "torch_default"]  # the paper's order


def test_a_comparison_over_fewer_seeds_than_its_arm_shows_its_seed_pairs():
    """The layout of the 12-layer runs: random and the authors' init over two seeds, the scale arm over one,
    so the symmetry-at-the-authors'-scale row rests on one pair while its candidate has two seeds."""
    losses, configs = arms(2)
    for name in ("symmetric-1", "torch_default-1"):
        del losses[name], configs[name]
    full = summarise(losses, configs)
    shown = table1_display(full).set_index(["init", "vs"])
    assert shown.loc[("torch_default_symmetric", "torch_default"), ["seeds", "seed pairs"]].tolist() == [
        2,
        "1",
    ]
    assert shown.loc[("torch_default_symmetric", "random"), ["seeds", "seed pairs"]].tolist() == [2, "2"]
    assert shown.loc[("random", ""), "seed pairs"] == ""
    paper = paper_table1(full).set_index("init")
    assert paper.loc["torch_default", "seed pairs"] == "1" and paper.loc["random", "seed pairs"] == ""


def test_an_arm_no_faster_than_random_is_not_called_faster():
    losses, configs = arms(6)
    for seed in range(6):  # the symmetric arm now the random curve with other noise
        losses[f"symmetric-{seed}"] = curve(0.0, 1000 + seed)
    row = summarise(losses, configs).set_index(["init", "reference"]).loc["symmetric", "random"]
    assert abs(row["speedup_robust"]) < 3 and not row["verdict"].startswith("faster")


def test_five_seeds_leave_the_exact_test_below_its_reach():
    row = summarise(*arms(5)).set_index(["init", "reference"]).loc["torch_default_symmetric", "random"]
    assert row["verdict"] == "faster than seed noise (t-test)" and row["signed_p_sign_flip"] == 0.0625
    assert row["verdict_exact"] == "cannot reach alpha 0.05 with 5 seeds (sign-flip test: p ≥ 2/2^5 = 0.0625)"


def test_the_paper_shaped_table_has_one_row_per_init_against_random():
    """The readable Table 1: one row per init (the authors' symmetric init against its scale control is left
    to the supplementary blocks), the speed-up built into the logs with its interval, no speed-up for the
    reference itself."""
    full = summarise(*arms(6))
    shown = paper_table1(full).set_index("init")
    assert list(shown.index) == list(FASTER_BY)
    assert shown.loc["random", "speed-up over random %"] == ""
    for init in ("symmetric", "torch_default", "torch_default_symmetric"):
        mean = float(shown.loc[init, "speed-up over random %"].split(" [")[0])
        assert mean == pytest.approx(expected(init, "random"), abs=1.5)
        assert shown.loc[init, "p (t; sign-flip)"].endswith("; 0.031")  # 2/2^6: every seed one way
    assert "authors at T" not in shown  # no authors' logs given: no empty column
