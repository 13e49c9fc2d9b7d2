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
    assert found["encoders end more symmetric than causal-loss decoders (random init)"] == "agrees"
    assert found["causal-loss decoders: negative directionality (column-dominant)"] == "agrees"
    # the paper's decoder claims (Section 4, Figure 3), every seed of the 3 causal decoders
    decoders = "causal-loss decoders"
    assert (
        found[
            f"{decoders}: directionality emerges during training (median |directionality|, init → end; Thm 2.3)"
        ]
        == "agrees"
    )
    assert (
        found[
            f"{decoders}: middle layers skew-symmetric (median symmetry of the inner layers < 0, Figure 3c)"
        ]
        == "agrees"
    )
    assert (
        found[
            f"{decoders}: later layers more directional (slope of |directionality| over layer index, Figure 3d)"
        ]
        == "agrees"
    )
    # seed 0's decoder ends less directional than its encoder (0.27 vs 0.40): not every seed agrees
    assert (
        found[f"{decoders} end more directional than encoders (median |directionality|, Figure 3b)"]
        == "mixed"
    )
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
    # the same decoders labelled as trained with the authors' masked loss are judged as their own group
    masked = scores.assign(decoder_loss=scores["decoder_loss"].replace("causal", "masked"))
    relabelled = claims(masked, table1(RUNS)).set_index("claim")["verdict"]
    assert relabelled["masked-loss decoders: negative directionality (column-dominant)"] == "agrees"
    assert not relabelled.index.str.startswith("causal-loss").any()


PAPER_RECIPE = sorted(
    f
    for f in (
        Path(__file__).resolve().parents[1] / "benchmarks/results/training_repro_paper_recipe"
    ).iterdir()
    if (f / "loss.parquet").exists()
)


def test_an_init_the_authors_never_ran_is_judged_by_direction_only():
    """The committed paper-recipe runs (5 seeds, 15,300 updates, symmetry at BERT's init scale): the t-test
    finds the speed-up and the lower loss, but the authors never ran that init (theirs is
    torch_default_symmetric), so there is no run of theirs to size it against."""
    scores, _ = load_runs(PAPER_RECIPE)
    table = table1(PAPER_RECIPE, authors_logs=authors.read_logs(AUTHORS_LOGS))
    assert table.filter(like="authors_").isna().all().all()  # their runs are set beside their own init only
    found = claims(scores, table).set_index("claim")
    speed = found.loc["symmetric init speeds up training (encoders, Table 1)"]
    assert speed["verdict"].startswith("direction only: the authors ran no symmetric init")
    assert "sign-flip p = 0.0625 (≥ 0.0625 with 5 seeds)" in speed["test"]
    loss = found.loc["symmetric init ends at a lower loss (encoders, Table 1)"]
    assert loss["verdict"].startswith("direction only: the authors ran no symmetric init")
    spread = found.loc["symmetric init narrows the spread of symmetry across layers (encoders, Figure S5c)"]
    assert spread["verdict"] == "agrees" and spread["test"].startswith("t-test over 5 seed pairs")


def test_on_the_init_arm_runs_the_authors_init_agrees_in_size_and_symmetry_alone_has_no_yardstick():
    """The committed init-arm runs (4 × H100, 15,000 updates, 5 seeds): the authors' init reaches the
    random run's final loss 25% [14.5, 35.5] sooner; the authors' own Jigsaw run at that horizon (28%, one
    seed) lies where one more seed of ours would fall (95% prediction interval [−0.8, 50.8]); symmetry at
    BERT's scale is faster too, and judged by direction only (the authors never ran it)."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks/results/init_arms_4xh100"
    runs = sorted(p for p in folder.iterdir() if (p / "loss.parquet").exists())
    table = table1(runs, authors_logs=authors.read_logs(AUTHORS_LOGS))
    rows = table.set_index(["characters", "init", "reference"])
    authors_row = rows.loc[(False, "torch_default_symmetric", "random")]
    assert authors_row["speedup_robust"] == pytest.approx(25.0, abs=0.1)
    assert authors_row["speedup_robust_pred_low"] == pytest.approx(-0.83, abs=0.01)
    assert authors_row["speedup_robust_pred_high"] == pytest.approx(50.83, abs=0.01)
    assert authors_row["authors_jigsaw_end_robust"] == pytest.approx(20.5, abs=0.05)  # their 200,000
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
        "direction only: the authors ran no symmetric init"
    )
    # characters, 3 seeds: Wikipedia's 36% and RedPajama's 16% at 10,000 updates both inside [14.5, 50.6]
    assert verdicts["characters", authors_init] == "agrees"
    # had the authors' run been far faster than any seed of ours, the same numbers would not agree
    fast = table.assign(authors_jigsaw_robust=table["authors_jigsaw_robust"] * 0 + 60.0)
    verdict = claims(scores, fast).set_index(["text", "claim"]).loc[("word pieces", authors_init), "verdict"]
    assert verdict.startswith(
        "direction only: the authors' run at this horizon (jigsaw 60.00 %) lies outside"
    )
    # the score claims of the two kinds of text are judged apart
    s5b = "torch_default_symmetric init ends more symmetric than random init (encoders, Figure S5b)"
    assert verdicts["word pieces", s5b] == "agrees" and verdicts["characters", s5b] == "agrees"


def test_on_the_12_layer_runs_the_authors_init_is_faster_but_below_their_own_logs():
    """The committed 12-layer runs (2 × H200, 4,000 updates, 3 seeds): the authors' init reaches the random
    run's final loss 9.8% [2.2, 17.4] sooner; the authors' 12-layer Jigsaw run at that horizon (20%, one
    seed) lies where one more seed of ours would fall ([−5.4, 25.0]); their loss gap (−0.54 nats) does not
    ([−0.50, 0.05]), so that claim is called agreement in direction only."""
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
    assert verdicts["torch_default_symmetric init speeds up training (encoders, Table 1)"] == "agrees"
    gap = verdicts["torch_default_symmetric init ends at a lower loss (encoders, Table 1)"]
    assert gap.startswith("direction only: the authors' run at this horizon (jigsaw -0.54 nats) lies outside")
