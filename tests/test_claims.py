"""The paper's training claims against the committed GPU runs (attngeom.runstats.claims)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attngeom.report.training_figures import load_runs
from attngeom.runstats import authors
from attngeom.runstats.claims import claims
from attngeom.runstats.table1 import table1

AUTHORS_LOGS = Path(__file__).resolve().parents[1] / "config" / "reference" / "authors-logs"
RUNS = sorted(
    (Path(__file__).resolve().parents[1] / "benchmarks/results/training_repro_seeds/runs").iterdir()
)


def test_the_claims_table_of_the_gpu_runs_says_what_every_seed_shows():
    scores, _ = load_runs(RUNS)
    found = claims(scores, table1(RUNS)).set_index("claim")["verdict"]
    assert found["encoders end more symmetric than decoders (random init)"] == "agrees"
    assert found["decoders: negative directionality (column-dominant)"] == "agrees"
    # in every seed the encoder's symmetry falls with depth: against the paper's "later layers more symmetric"
    assert found["encoders: later layers more symmetric (slope of symmetry over layer index)"] == "disagrees"
    assert found["symmetric init ends more symmetric than random init (encoders, Figure S5b)"] == "mixed"
    assert found["symmetric init speeds up training (encoders, Table 1)"].startswith(
        "not shown (effects ≥ 11 %"
    )
    assert found["symmetric init ends at a lower loss (encoders, Table 1)"] == "not shown"
    spread = "symmetric init narrows the spread of symmetry across layers (encoders, Figure S5c)"
    assert found[spread] == "not shown"  # 3 seeds, wider with symmetric init in each: t-test p 0.12

    # the same runs with the encoder's layers in reverse order: the depth claim now agrees
    flipped = scores.assign(layer=scores["layer"].max() - scores["layer"])
    again = claims(flipped, table1(RUNS)).set_index("claim")["verdict"]
    assert again["encoders: later layers more symmetric (slope of symmetry over layer index)"] == "agrees"
    assert claims(scores.iloc[:0], table1(RUNS)[lambda t: t["init"] == "random"]).empty


PAPER_RECIPE = sorted(
    f
    for f in (
        Path(__file__).resolve().parents[1] / "benchmarks/results/training_repro_paper_recipe"
    ).iterdir()
    if (f / "loss.parquet").exists()
)


def test_a_speedup_found_but_far_smaller_than_the_authors_is_not_called_agreement():
    """The committed paper-recipe runs (5 seeds, 15,300 updates): the t-test finds the speed-up and the
    lower loss, but the authors' own runs cut at that horizon lie far outside our intervals."""
    scores, _ = load_runs(PAPER_RECIPE)
    table = table1(PAPER_RECIPE, authors_logs=authors.read_logs(AUTHORS_LOGS))
    found = claims(scores, table).set_index("claim")
    speed = found.loc["symmetric init speeds up training (encoders, Table 1)"]
    assert speed["verdict"].startswith("direction only: the authors' value at this horizon (jigsaw 27.63 %)")
    assert "sign-flip p = 0.0625 (≥ 0.0625 with 5 seeds)" in speed["test"]
    loss = found.loc["symmetric init ends at a lower loss (encoders, Table 1)"]
    assert loss["verdict"].startswith("direction only") and "jigsaw -0.56 nats" in loss["verdict"]
    spread = found.loc["symmetric init narrows the spread of symmetry across layers (encoders, Figure S5c)"]
    assert spread["verdict"] == "agrees" and spread["test"].startswith("t-test over 5 seed pairs")

    # had the authors' runs been as slow as ours at this horizon, the same numbers would agree
    ours = table["speedup_robust"].dropna().iloc[0]
    table["authors_jigsaw_robust"] = table["authors_jigsaw_robust"].where(
        table["authors_jigsaw_robust"].isna(), ours
    )
    assert claims(scores, table).set_index("claim").loc[speed.name, "verdict"] == "agrees"
    without = table1(PAPER_RECIPE)  # no authors' logs: nothing to size the effect against
    verdict = claims(scores, without).set_index("claim").loc[speed.name, "verdict"]
    assert verdict.startswith("direction only: no authors' run")


def test_on_the_init_arm_runs_the_authors_init_agrees_in_size_and_symmetry_alone_does_not():
    """The committed init-arm runs (4 × H100, 15,000 updates, 5 seeds): the authors' init reaches the
    random run's final loss 25% [14.5, 35.5] sooner, and the authors' own Jigsaw runs at that horizon (28%)
    lie inside; symmetry at BERT's scale is faster too, but far below their number."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks/results/init_arms_4xh100"
    runs = sorted(p for p in folder.iterdir() if (p / "loss.parquet").exists())
    table = table1(runs, authors_logs=authors.read_logs(AUTHORS_LOGS))
    rows = table.set_index(["characters", "init", "reference"])
    assert rows.loc[(False, "torch_default_symmetric", "random"), "speedup_robust"] == pytest.approx(
        25.0, abs=0.1
    )
    assert rows.loc[(False, "torch_default", "random"), "speedup_robust"] == pytest.approx(15.4, abs=0.1)
    scores, _ = load_runs(runs)
    verdicts = claims(scores, table).set_index(["text", "claim"])["verdict"]
    authors_init = "torch_default_symmetric init speeds up training (encoders, Table 1)"
    assert verdicts["word pieces", authors_init] == "agrees"
    assert (
        verdicts["word pieces", "torch_default_symmetric init ends at a lower loss (encoders, Table 1)"]
        == "agrees"
    )
    assert verdicts["word pieces", "symmetric init speeds up training (encoders, Table 1)"].startswith(
        "direction only: the authors' value at this horizon (jigsaw 28.00 %)"
    )
    # characters: inside Wikipedia's 36% at 10,000 updates, not RedPajama's 16%: not called agreement
    assert "red_pajama 16.00 %" in verdicts["characters", authors_init]
    # the score claims of the two kinds of text are judged apart
    s5b = "torch_default_symmetric init ends more symmetric than random init (encoders, Figure S5b)"
    assert verdicts["word pieces", s5b] == "agrees" and verdicts["characters", s5b] == "agrees"


def test_on_the_12_layer_runs_the_authors_init_is_faster_but_below_their_own_logs():
    """The committed 12-layer runs (2 × H200, 4,000 updates, 3 seeds): the authors' init reaches the random
    run's final loss 9.8% [2.2, 17.4] sooner; the authors' 12-layer Jigsaw runs at that horizon (20%) lie
    outside the interval, so only the direction is called agreement."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks/results/init_arms_layers12_2xh200"
    runs = sorted(p for p in folder.iterdir() if (p / "loss.parquet").exists())
    table = table1(runs, authors_logs=authors.read_logs(AUTHORS_LOGS))
    row = table.set_index(["init", "reference"]).loc[("torch_default_symmetric", "random")]
    assert (row["layers"], row["steps"], row["seed_pairs"]) == (12, 4000, 3)
    assert row["speedup_robust"] == pytest.approx(9.8, abs=0.1)
    assert row["speedup_robust_low"] > 0 and row["loss_gap_high"] < 0
    assert row["signed_p_sign_flip"] == pytest.approx(0.25)  # 2/2^3: the floor of an exact test
    scores, _ = load_runs(runs)
    verdicts = claims(scores, table).set_index("claim")["verdict"]
    speed = verdicts["torch_default_symmetric init speeds up training (encoders, Table 1)"]
    assert speed.startswith("direction only: the authors' value at this horizon (jigsaw 20.00 %)")
