"""Table 1 speed-up, and the training figures and comparison drawn from real (tiny) runs."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from attngeom.artifacts import ARTIFACT
from attngeom.report.training_figures import (
    COLOURS,
    evolution_figure,
    horizon_figure,
    load_runs,
    official_figure,
    speedup_note,
    symmetric_init_figure,
)
from attngeom.runstats.horizon import horizon_summary, speedup_by_horizon
from attngeom.runstats.intervals import mean_interval, t_975
from attngeom.runstats.official import compare_official, nearest_official, official_note, ours_medians
from attngeom.runstats.pairing import SeedPair, Twin, comparison_key, seed_pairs, twins
from attngeom.runstats.smoothing import smoothed
from attngeom.runstats.speedup import CLAIM_RULE, RULES, paper_speedup, signed_speedup, speedup
from attngeom.runstats.table1 import pair_speedups, summarise, table1
from attngeom.runstats.table1_display import table1_display, write_table1
from attngeom.training.config import dataset_label, make_config
from attngeom.training.loop import train
from attngeom.training.runs import SUBSTITUTE_KEY, RunFolder, RunInfo, write_config


def curve(values) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    return pd.DataFrame({"step": np.arange(1, len(values) + 1), "loss": values})


def test_speedup_follows_the_papers_definition_where_the_random_run_ends_at_its_lowest():
    random = curve(np.linspace(10, 2, 100))  # final loss 2 at step 100
    faster = curve(np.concatenate([np.linspace(10, 2, 40), np.full(60, 1.5)]))  # reaches 2 at step 40
    assert speedup(random, faster, window=1) == pytest.approx(60.0)
    assert paper_speedup(random, faster, window=1) == pytest.approx(60.0)  # (T − t_symmetric) / T
    assert speedup(random, random, window=1) == pytest.approx(0.0)
    assert speedup(random, curve(np.full(100, 3.0)), window=1) == 0.0  # never reaches it
    assert signed_speedup(random, faster, window=1) == pytest.approx(60.0)  # random never reaches 1.5
    assert signed_speedup(faster, random, window=1) == pytest.approx(-60.0)


def test_smoothing_ignores_a_single_lucky_batch():
    random = curve(np.linspace(10, 2, 100))
    noisy = np.linspace(10, 2.5, 100)
    noisy[10] = 0.0  # one outlier (step 11) far below the target
    assert speedup(random, curve(noisy), window=1) == pytest.approx(89.0)
    assert speedup(random, curve(noisy), window=10) == 0.0
    assert smoothed(curve([1, 2, 3, 4]), window=2)["loss"].tolist() == [1, 1.5, 2.5, 3.5]


def test_dataset_labels():
    assert dataset_label("sotu") == "sotu"
    assert dataset_label("/data/corpus.parquet") == "corpus"
    assert dataset_label("hf:org/my-set:en") == "my-set"


def plateau(seed: int, better: float = 0.0, n: int = 300) -> pd.DataFrame:
    """A realistic loss log: fast descent, then a plateau with noise σ = 0.05; ``better`` lowers the
    descent's tail (a run that gets there sooner)."""
    steps = np.arange(1, n + 1) * 10
    mean = 2 + 6 * np.exp(-steps / 300) - better * np.exp(-steps / 1500)
    return pd.DataFrame({"step": steps, "loss": mean + np.random.default_rng(seed).normal(0, 0.05, n)})


def test_a_run_against_itself_is_no_speedup_on_a_noisy_plateau():
    log = plateau(0)
    smooth = smoothed(log)
    literal = 3000 - smooth.loc[smooth["loss"] <= smooth["loss"].iloc[-1], "step"].iloc[0]
    assert 100 * literal / 3000 > 30  # the paper's formula, taken literally, times the first noisy dip
    assert paper_speedup(log, log) == pytest.approx(100 * literal / 3000)
    for rule in RULES:
        assert speedup(log, log, rule=rule) == 0.0
        assert signed_speedup(log, log, rule=rule) == 0.0


def test_the_robust_rule_ignores_a_stretch_that_dips_below_and_comes_back():
    random = curve(np.linspace(10, 2, 100))
    dip = np.linspace(10, 2, 100)
    dip[20:30] = 1.0  # ten lucky steps, then back on the random run's curve
    assert speedup(random, curve(dip), window=1, rule="first") == pytest.approx(79.0)
    assert speedup(random, curve(dip), window=1, rule="robust") == 0.0
    faster = curve(np.concatenate([np.linspace(10, 2, 40), np.full(60, 1.5)]))
    assert speedup(random, faster, window=1, rule="robust") == pytest.approx(60.0)


def test_a_slower_run_gets_a_negative_speedup_and_logs_are_compared_up_to_their_common_step():
    random = curve(np.concatenate([np.linspace(10, 2, 50), np.full(50, 2.0)]))  # reaches 2 at step 50
    slower = curve(np.linspace(10, 2, 100))  # reaches 2 only at step 100
    assert speedup(random, slower, window=1, rule="robust") == pytest.approx(-50.0)
    assert speedup(random, curve(np.full(100, 3.0)), window=1) == pytest.approx(-50.0)  # never: at most this
    stopped = curve(np.linspace(10, 2, 100)[:60])  # stopped at step 60 (a deadline), loss still 5.2
    assert speedup(random, stopped, window=1, rule="first") == pytest.approx(100 * (50 - 60) / 60)


def config(**settings):
    return make_config({"dataset": "sotu", "n_layers": 4}, settings)


def test_seed_pairs_are_the_null_random_runs_of_other_seeds_in_the_same_setting():
    configs = {
        **{f"r{s}": config(seed=s) for s in (0, 1, 2)},
        "r-lr0": config(lr=1e-3, seed=0),
        "r-lr1": config(lr=1e-3, seed=1),
        "r-alone": config(objective="decoder"),
        "s0": config(seed=0, init="symmetric"),
        "r-reg": config(seed=3, reg_weight=0.1),
    }
    assert seed_pairs(configs) == [
        SeedPair("r-lr0", "r-lr1", 0, 1),  # two seeds: one pair
        SeedPair("r0", "r1", 0, 1),  # three seeds: disjoint pairs, so one, and seed 2 in none
    ]
    five = {f"r{s}": config(seed=s) for s in range(5)}
    assert [(p.reference_seed, p.other_seed) for p in seed_pairs(five)] == [(0, 1), (2, 3)]
    assert comparison_key(configs["r0"]) == comparison_key(configs["s0"])
    assert comparison_key(configs["r0"]) != comparison_key(configs["r-lr0"])


def test_runs_of_a_corpus_copied_to_another_folder_pair_and_runs_of_other_tokens_are_refused():
    """Seeds run in separate holds of a GPU host read the same corpus from another path: they pair (a local
    file compares by name); two corpora of one name that tokenised differently are not compared."""
    here, there = (config(seed=s, dataset=f"/{where}/sotu.txt") for s, where in ((0, "a"), (1, "b")))
    assert comparison_key(here) == comparison_key(there)
    assert comparison_key(here) != comparison_key(config(seed=1, dataset="/b/other.txt"))
    assert comparison_key(config(dataset="org/sotu.txt")) != comparison_key(config(dataset="other/sotu.txt"))
    losses = {"r0": plateau(0), "r1": plateau(1)}
    configs = {"r0": here, "r1": there}
    infos = {
        n: RunInfo(n, c, tokens_sha256=digest) for (n, c), digest in zip(configs.items(), "ab", strict=True)
    }
    with pytest.raises(ValueError, match="runs r0 and r1 have the same settings but read different tokens"):
        summarise(losses, configs, None, None, infos)
    same = {n: RunInfo(n, c, tokens_sha256="a") for n, c in configs.items()}
    assert summarise(losses, configs, None, None, same).loc[0, "seeds"] == 2


def test_the_speedup_note_of_a_decoder_figure_keeps_to_its_loss():
    """Decoders of the masked and the causal loss are separate Table 1 rows; a Figure S5 of one loss
    carries that row's line only."""
    losses, configs = {}, {}
    for loss in ("masked", "causal"):
        for seed in range(2):
            for init in ("random", "torch_default_symmetric"):
                name = f"{loss}-{init}-{seed}"
                losses[name] = plateau(2 * seed + (init != "random"), 0.3 if init != "random" else 0)
                configs[name] = config(init=init, seed=seed, objective="decoder", decoder_loss=loss)
    table = summarise(losses, configs)
    both = speedup_note(table, "sotu", 4, "decoder").splitlines()
    masked = speedup_note(table, "sotu", 4, "decoder", decoder_loss="masked").splitlines()
    assert len(both) == 2 and len(masked) == 1 and masked[0] in both


def seeded_logs(n_seeds: int, better: float, dataset: str = "jigsaw", symmetric: str = "symmetric"):
    """Loss logs and configs of random and ``symmetric``-init runs over ``n_seeds`` seeds; the symmetric
    runs are ``better`` (0: the same curve, other noise)."""
    losses, configs = {}, {}
    for seed in range(n_seeds):
        for init in ("random", symmetric):
            name = f"{init}-{seed}"
            losses[name] = plateau(2 * seed + (init != "random"), better if init != "random" else 0)
            configs[name] = config(init=init, seed=seed, dataset=dataset)
    return losses, configs


def test_table1_reports_a_clear_speedup_with_its_interval_above_the_null():
    paper = pd.read_csv("config/reference/paper_table1_symmetric_init.csv")
    table = summarise(*seeded_logs(3, better=0.5), paper).set_index("init")
    sym = table.loc["symmetric"]
    assert sym["seeds"] == 3 and sym["seed_pairs"] == 3 and sym["null_pairs"] == 1
    assert sym["run"] == "symmetric-0, symmetric-1, symmetric-2"
    assert sym["signed_p_t"] < 0.05 and sym["verdict"] == "faster than seed noise (t-test)"
    assert sym["signed_p_sign_flip"] == 0.25 and sym["least_exact_p"] == 0.25  # 3 seeds: 2/2³ at best
    assert sym["verdict_exact"].startswith("cannot reach alpha 0.05 with 3 seeds")
    assert 0 < sym["mde"] < sym["signed"] and sym["censored"] == 0
    assert sym["speedup_robust_low"] < sym["speedup_robust"] < sym["speedup_robust_high"]
    assert np.isnan(sym["paper_speedup_percent"])  # the paper's symmetric arm is the authors' init, not this
    theirs = summarise(*seeded_logs(3, 0.5, symmetric="torch_default_symmetric"), paper).set_index("init")
    assert theirs.loc["torch_default_symmetric", "paper_speedup_percent"] == 26  # 4-layer jigsaw + symm
    assert np.isnan(table.loc["random", "speedup_robust"]) and table.loc["random", "verdict"] == ""
    finals = [float(smoothed(plateau(2 * s))["loss"].iloc[-1]) for s in range(3)]
    assert table.loc["random", "final_loss"] == pytest.approx(np.mean(finals))
    half = 4.3027 * np.std(finals, ddof=1) / np.sqrt(3)
    assert table.loc["random", "final_loss_high"] == pytest.approx(np.mean(finals) + half)


def test_table1_labels_a_speedup_that_overlaps_the_null_as_seed_noise():
    table = summarise(*seeded_logs(3, better=0.0)).set_index("init")
    assert table.loc["symmetric", "verdict"] == "not distinguishable from seed noise (t-test)"
    shown = table1_display(table.reset_index())
    assert "not distinguishable from seed noise (t-test)" in shown["verdict"].tolist()
    assert list(shown.columns[:9]) == [
        "depth",
        "dataset",
        "objective",
        "init",
        "vs",
        "effect",
        "seeds",
        "seed pairs",
        "steps",
    ]


def test_the_figure_s_line_says_why_a_test_figure_is_undefined_instead_of_nan():
    """Both arms of every seed the same curve: every speed-up 0, no spread, so no MDE (it was printed as
    "MDE nan %"); the sign-flip p of 1 is shown beside the least p 3 seeds allow."""
    losses, configs = seeded_logs(3, better=0.0)
    losses |= {f"symmetric-{s}": losses[f"random-{s}"] for s in range(3)}
    table = summarise(losses, configs)
    assert np.isnan(table.set_index("init").loc["symmetric", "mde"])
    (line,) = speedup_note(table, "jigsaw", 4, "encoder").splitlines()
    assert "nan" not in line
    assert "no MDE (the seed pairs' speed-ups do not vary)" in line
    assert "sign-flip p = 1.0000 (≥ 0.25 at 3 seeds)" in line
    varied = speedup_note(summarise(*seeded_logs(3, better=0.5)), "jigsaw", 4, "encoder")
    assert re.search(r"MDE \d+\.\d %", varied)


def test_table1_with_one_seed_gives_no_interval_and_no_verdict():
    losses, configs = seeded_logs(1, better=0.5)
    table = summarise(losses, configs).set_index("init")
    assert np.isnan(table.loc["symmetric", "final_loss_low"]) and np.isnan(
        table.loc["symmetric", "speedup_robust_low"]
    )
    assert table.loc["symmetric", "verdict"] == "one seed: no test"
    assert np.isnan(table.loc["symmetric", "signed_p_t"]) and np.isnan(table.loc["symmetric", "mde"])
    assert np.isnan(table.loc["symmetric", "signed_p_sign_flip"])
    shown = table1_display(table.reset_index()).set_index("init")
    assert shown.loc["random", "final loss"].endswith("(one seed: no interval)")
    assert "±" not in " ".join(shown.astype(str).to_numpy().ravel())


RECORDED_SUBSTITUTE = "Wikipedia 20231101.en (as this run's corpus.json records it)"


def recorded(folder, configs) -> dict[str, RunInfo]:
    """Each config as a run folder records it (config.yaml, corpus.json), read back: the wikipedia runs'
    corpus.json names ``RECORDED_SUBSTITUTE`` instead of the paper's corpus, the others nothing."""
    infos = {}
    for name, settings in configs.items():
        run = RunFolder(folder / name)
        run.path.mkdir(parents=True)
        write_config(settings, run.config)
        substitute = {SUBSTITUTE_KEY: RECORDED_SUBSTITUTE} if settings.dataset == "wikipedia" else {}
        run.corpus.write_text(json.dumps({"tokens_sha256": "0" * 64, **substitute}))
        infos[name] = RunInfo.read(run.path)
    return infos


def test_table1_groups_by_depth_then_dataset_and_keeps_random_vs_random_out_of_the_speedups(tmp_path):
    losses, configs = seeded_logs(2, better=0.5, dataset="wikipedia")
    more, more_configs = seeded_logs(2, better=0.5, dataset="jigsaw")
    losses |= {f"j-{k}": v for k, v in more.items()}
    configs |= {f"j-{k}": v for k, v in more_configs.items()}
    deep = config(n_layers=12, seed=0)
    losses["deep"], configs["deep"] = plateau(9), deep
    table = summarise(losses, configs, infos=recorded(tmp_path / "runs", configs))
    assert table[["layers", "dataset", "init"]].values.tolist() == [
        [4, "jigsaw", "random"],
        [4, "jigsaw", "symmetric"],
        [4, "wikipedia", "random"],
        [4, "wikipedia", "symmetric"],
        [12, "sotu", "random"],
    ]
    pairs = pair_speedups(losses, configs)
    null = pairs[pairs["comparison"].str.startswith("null")]
    assert set(zip(null["reference"], null["candidate"], strict=True)) == {
        ("random-0", "random-1"), ("j-random-0", "j-random-1")
    }  # fmt: skip
    assert (null["reference_seed"] != null["candidate_seed"]).all()
    notes = dict(zip(table["dataset"], table["corpus_note"], strict=False))
    assert notes["wikipedia"] == RECORDED_SUBSTITUTE and notes["sotu"] == ""
    assert notes["jigsaw"] == ""  # its corpus.json (an older run's) names no substitute: none is made up
    write_table1(table, tmp_path / "table_1", ARTIFACT["table_1"].title)
    markdown = (tmp_path / "table_1.md").read_text()
    assert RECORDED_SUBSTITUTE in markdown
    assert markdown.index("## Table 1") < markdown.index("## Supplementary: every comparison, 4-layer models")
    assert markdown.index("4-layer models") < markdown.index("12-layer models")  # as the paper prints it
    assert "95% Student-t interval over seeds" in markdown and "faster than seed noise (t-test)" in markdown
    assert "one-sample t-test over seeds" in markdown and "0 of 2 > T" in markdown
    assert "cannot reach alpha 0.05 with 2 seeds" in markdown  # the exact test says what it cannot do
    assert pd.read_csv(tmp_path / "table_1.csv")["speedup_robust_low"].notna().sum() == 2
    assert (tmp_path / "table_1.tex").read_text().count(r"\begin{tabular}") == 3  # the paper's, 2 depths


def student_t_cdf(x: float, df: int) -> float:
    """P(T ≤ x) by integrating Student's t density numerically (independent of scipy, which ``t_975`` uses)."""
    t = np.linspace(0, x, 200_001)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = np.exp(log_c - (df + 1) / 2 * np.log1p(t**2 / df))
    return 0.5 + float(np.sum((density[1:] + density[:-1]) / 2) * (t[1] - t[0]))


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 29, 30, 31, 60, 500])
def test_the_t_quantile_is_the_975_quantile(df):
    assert student_t_cdf(t_975(df), df) == pytest.approx(0.975, abs=2e-5)


def test_mean_interval_is_the_t_interval_and_covers_95_percent():
    found = mean_interval([1.0, 2.0, 3.0])
    assert (found.mean, found.n) == (2.0, 3)
    assert found.half_width == pytest.approx(4.3027 / math.sqrt(3), abs=1e-4)  # t₀.₉₇₅(2) = 4.3027
    single = mean_interval([5.0])
    assert single.mean == 5.0 and not single.computable and math.isnan(single.low)
    assert single.plus_minus(2) == "5.00 (one seed: no interval)"
    assert found.overlaps(mean_interval([4.0, 5.0, 6.0])) and not found.overlaps(
        mean_interval([9.0, 9.1, 9.2])
    )
    rng = np.random.default_rng(0)
    covered = [mean_interval(rng.normal(1.0, 2.0, 3)) for _ in range(4000)]
    assert np.mean([i.low <= 1.0 <= i.high for i in covered]) == pytest.approx(0.95, abs=0.01)
    with pytest.raises(ValueError, match="non-finite"):
        mean_interval([1.0, float("nan")])


def fake_run(folder, dataset, init, losses, objective="encoder", seed=0):
    folder.mkdir(parents=True)
    config = make_config({"dataset": dataset, "init": init, "objective": objective, "seed": seed})
    (folder / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    curve(losses).to_parquet(folder / "loss.parquet")
    return folder


def test_table1_reads_run_folders(tmp_path):
    runs = [
        fake_run(tmp_path / "r", "jigsaw", "random", np.linspace(10, 2, 100)),
        fake_run(
            tmp_path / "s",
            "jigsaw",
            "torch_default_symmetric",
            np.concatenate([np.linspace(10, 2, 50), np.full(50, 1.0)]),
        ),
        fake_run(tmp_path / "d", "jigsaw", "random", np.linspace(9, 3, 100), objective="decoder"),
    ]
    paper = pd.read_csv("config/reference/paper_table1_symmetric_init.csv")
    table = table1(runs, paper).set_index("run")
    assert table.loc["s", "speedup_paper"] > 40 and table.loc["s", "seed_pairs"] == 1
    assert np.isnan(table.loc["r", "speedup_paper"])
    assert table.loc["s", "paper_speedup_percent"] == 26  # the paper's symmetric arm: the authors' init
    assert np.isnan(table.loc["d", "paper_loss"])  # Table 1 has no decoders


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """Real tiny runs: encoder random and symmetric init over seeds 0 and 1, one decoder."""
    root = tmp_path_factory.mktemp("runs")
    corpus = root / "corpus.txt"
    rng = np.random.default_rng(0)
    words = np.array("the a nation people congress state war peace law union free trade".split())
    corpus.write_text("\n".join(" ".join(rng.choice(words, 20)) for _ in range(300)) + "\n")
    base = dict(
        dataset=str(corpus), cache_dir=str(root / "cache"), n_layers=2, hidden_size=32, n_heads=4,
        intermediate_size=64, seq_len=32, vocab_size=200, batch_size=4, grad_accum=1, steps=6, score_every=3,
        log_every=1,
    )  # fmt: skip
    runs = []
    for objective, init, seed in (
        ("encoder", "random", 0),
        ("encoder", "symmetric", 0),
        ("decoder", "random", 0),
        ("encoder", "random", 1),
        ("encoder", "symmetric", 1),
    ):
        config = make_config(base, {"objective": objective, "init": init, "seed": seed})
        runs.append(train(config, root / f"{objective}-{init}-{seed}", progress=False))
    return runs


def titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


def test_figures_are_written_as_pdf_and_png(tiny_runs, tmp_path):
    scores, losses = load_runs(tiny_runs)
    assert set(scores["step"]) == {0, 3, 6}
    evolution_figure(scores, "corpus", 2, tmp_path / "evolution")
    symmetric_init_figure(scores, losses, "corpus", 2, "encoder", tmp_path / "s5", table1(tiny_runs))
    official = pd.read_csv("config/reference/official_training_evolution.csv")
    official_figure(scores, official, tmp_path / "official")
    written = sorted(tmp_path.iterdir())
    assert [p.name for p in written] == [
        f"{s}.{e}" for s in ("evolution", "official", "s5") for e in ("pdf", "png")
    ]
    assert all(p.stat().st_size > 1000 for p in written)


def test_every_evolution_panel_names_its_quantity_and_per_layer_panels_overlay_the_layer_form(
    tiny_runs, tmp_path
):
    scores, _ = load_runs(tiny_runs)
    fig = evolution_figure(scores, "corpus", 2, tmp_path / "evolution")
    panels = titles(fig)
    assert len(panels) == 6
    assert all("Σ_h M_h" in t for t in panels)  # the layer form: alone (a, b) or drawn over the heads
    assert all("median over layers" in t for t in panels[:2])
    assert all("median over heads" in t for t in panels[2:])
    assert [t[:2] for t in panels] == ["a)", "b)", "c)", "c)", "d)", "d)"]  # c/d: encoder and decoder
    encoder_symmetry = fig.axes[2]
    forms = [line for line in encoder_symmetry.get_lines() if line.get_linestyle() == ":"]
    assert len(forms) == 2  # one per layer
    layer_1 = scores[
        (scores["run"].isin(["encoder-random-0", "encoder-random-1"]))
        & scores["head"].isna()
        & (scores["layer"] == 1)
    ]
    expected = layer_1.groupby("step")["symmetry"].median()
    assert np.allclose(forms[1].get_ydata(), expected.to_numpy())
    encoder = [line for line in fig.axes[0].get_lines() if line.get_color() == COLOURS["encoder"]]
    decoder = [line for line in fig.axes[0].get_lines() if line.get_color() == COLOURS["decoder"]]
    assert sorted(line.get_linewidth() < 1 for line in encoder) == [False, True, True]  # + 2 seeds
    assert len(decoder) == 1  # one seed: no thin line


def test_symmetric_init_figure_tells_random_from_symmetric_and_states_the_verdict(tiny_runs, tmp_path):
    scores, losses = load_runs(tiny_runs)
    table = table1(tiny_runs)
    fig = symmetric_init_figure(scores, losses, "corpus", 2, "encoder", tmp_path / "s5", table)
    loss_panel = fig.axes[0]
    lines = loss_panel.get_lines()
    assert len(lines) == 4  # two seeds × two inits
    styles = {(line.get_color(), line.get_linestyle()) for line in lines}
    assert len(styles) == 2  # random and symmetric each one colour and one line style, unlike each other
    verdict = table.set_index("init").loc["symmetric", "verdict"]
    assert verdict and verdict in fig.get_suptitle()
    assert "Σ_h M_h" in fig.axes[1].get_title() and "median over layers" in fig.axes[1].get_title()
    assert all("median over heads" in t for t in titles(fig)[2:])
    assert [t[:2] for t in titles(fig)] == ["a)", "b)", "c)", "d)"]  # every panel its own letter


def test_runs_are_tagged_from_their_config_yaml_and_twins_marked(tiny_runs):
    scores, losses = load_runs(tiny_runs)
    assert {"training_objective"}.isdisjoint(scores.columns)
    tags = scores.drop_duplicates("run").set_index("run")
    assert tags.loc["encoder-symmetric-0", "init"] == "symmetric"
    assert tags.loc["decoder-random-0", "objective"] == "decoder"
    assert tags.loc["encoder-random-1", "seed"] == 1
    assert tags["twin"].to_dict() == {
        "encoder-random-0": "encoder-symmetric-0",
        "encoder-symmetric-0": "encoder-symmetric-0",
        "decoder-random-0": None,
        "encoder-random-1": "encoder-symmetric-1",
        "encoder-symmetric-1": "encoder-symmetric-1",
    }
    assert RunInfo.read(tiny_runs[1]).labels()["init"] == "symmetric"


def test_comparison_with_the_authors_matches_depth_objective_dataset_and_step(tiny_runs):
    scores, _ = load_runs(tiny_runs)
    official = pd.read_csv("config/reference/official_training_evolution.csv")
    assert compare_official(scores, official).empty  # our corpus is none of theirs
    relabelled = official.assign(
        model=official["model"].str.replace("4 layers", "2 layers"),
        dataset=official["dataset"].replace("jigsaw", "corpus"),
        step=official["step"] // 1000 * 3,  # their steps 1000, 2000 → our 3, 6
    )
    merged = compare_official(scores, relabelled)
    assert set(merged["step"]) == {3, 6} and set(merged["objective"]) == {"encoder", "decoder"}
    mini = relabelled[
        relabelled["model"].str.contains("(2 layers)", regex=False) & (relabelled["dataset"] == "corpus")
    ]
    expected = mini[(mini["objective"] == "encoder") & (mini["step"] == 3)]["symmetry"].median()
    got = merged[(merged["objective"] == "encoder") & (merged["step"] == 3)]["symmetry_authors"].iloc[0]
    assert got == pytest.approx(expected)


def test_without_a_published_match_the_nearest_authors_run_is_named_and_drawn(tiny_runs, tmp_path):
    scores, _ = load_runs(tiny_runs)
    official = pd.read_csv("config/reference/official_training_evolution.csv")
    nearest = nearest_official(ours_medians(scores), official).set_index("objective")
    assert nearest[["layers", "dataset", "exact"]].to_dict("index") == {
        "encoder": {"layers": 4, "dataset": "jigsaw", "exact": False},
        "decoder": {"layers": 4, "dataset": "jigsaw", "exact": False},
    }
    note = official_note(ours_medians(scores), official)
    assert "no 2-layer encoder run on corpus" in note and "their 4-layer encoder on jigsaw" in note
    fig = official_figure(scores, official, tmp_path / "official")
    labels = [text.get_text() for ax in fig.axes if ax.get_legend() for text in ax.get_legend().get_texts()]
    assert "authors: 4L jigsaw (nearest published, not our setting)" in labels
    assert note in fig.get_suptitle()
    relabelled = official.assign(
        model=official["model"].str.replace("4 layers", "2 layers"),
        dataset=official["dataset"].replace("wikipedia", "corpus"),
    )
    ours = ours_medians(scores)
    assert nearest_official(ours, relabelled)["exact"].all() and official_note(ours, relabelled) == ""


def test_twins_pair_runs_that_differ_only_in_init_from_configs_alone():
    configs = {
        "r0": config(seed=0),
        "s0": config(
            seed=0, init="symmetric", score_every=7, device="cpu"
        ),  # bookkeeping differs: still twins
        "r1": config(seed=1, attention="dense"),
        "s1": config(seed=1, init="symmetric", attention="blocks"),  # trained alone and stacked: twins
        "s-other-lr": config(init="symmetric", lr=1e-3),  # no random run with this lr
        "s-reg": config(init="symmetric", reg_weight=0.1),  # regularised: never a twin
        "r-dec": config(objective="decoder"),
        "s-skew": config(init="skew"),
        "r-dec-other-seed": config(objective="decoder", seed=5, init="symmetric"),  # no random of its seed
    }
    assert twins(configs) == [
        Twin("r0", "s0", "random", "symmetric", "sotu", 4, "encoder", 0),
        Twin("r1", "s1", "random", "symmetric", "sotu", 4, "encoder", 1),
        Twin("r0", "s-skew", "random", "skew", "sotu", 4, "encoder", 0),  # every arm against random
    ]
    assert twins({"only": config()}) == []


def test_every_init_is_cut_at_each_horizon_against_random_of_its_seed(tmp_path):
    """Which part of a head start lasts: each arm against random, both logs cut at every horizon. A head
    start that closes shows a gap that shrinks to 0; an arm equal to random shows 0 at every horizon; the
    comparison against the scale control (not random) is Table 1's, not the horizon's."""
    steps = np.arange(1, 8_001)
    random = 2 + 8 * np.exp(-steps / 1_000)
    early = 2 + 8 * np.exp(-steps / 700)  # ahead early, the same loss late
    inits = {"random": random, "torch_default": random, "symmetric": early, "torch_default_symmetric": early}
    configs = {f"{i}-{s}": config(init=i, seed=s) for i in inits for s in (0, 1)}
    losses = {name: curve(inits[c.init]) for name, c in configs.items()}
    found = speedup_by_horizon(losses, configs)
    assert set(found["init"]) == {"symmetric", "torch_default", "torch_default_symmetric"}
    assert found.groupby("init")["seed"].nunique().eq(2).all()
    assert found["horizon"].min() == 4_000 and found["horizon"].max() == 8_000
    same = found[found["init"] == "torch_default"]
    assert (same["speedup"] == 0).all() and (same["loss_gap"] == 0).all()
    ahead = found[found["init"] == "symmetric"].sort_values("horizon")
    assert ahead["loss_gap"].iloc[0] < ahead["loss_gap"].iloc[-1] < 0  # a gap that closes
    last = ahead[ahead["horizon"] == 8_000].iloc[0]
    assert last["speedup"] == pytest.approx(
        speedup(curve(random), curve(early), rule=CLAIM_RULE)
    )  # Table 1's

    authors_run = pd.DataFrame({"dataset": "jigsaw", "horizon": [4_000, 8_000], "speedup": [20.0, 10.0],
                                "loss_gap": [-0.5, -0.1]})  # fmt: skip
    fig = horizon_figure(found, authors_run, 4, False, tmp_path / "horizon")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert [label.split(":")[0] for label in labels[:3]] == [
        "ours, symmetric",
        "ours, torch_default",
        "ours, torch_default_symmetric",
    ]
    assert labels[3] == "authors, torch_default_symmetric, jigsaw (one seed)"
    assert (tmp_path / "horizon.pdf").stat().st_size > 0 and (tmp_path / "horizon.png").stat().st_size > 0


def test_each_horizon_is_summarised_over_seeds_with_intervals_and_tests():
    """Over seeds at each horizon: the mean and its 95% t-interval, and the loss gap tested against 0; a
    horizon that only some seeds reached counts only those; one seed gives a mean and no interval."""
    gaps = {0: -0.30, 1: -0.20, 2: -0.25, 3: -0.35, 4: -0.40, 5: -0.28}  # every seed one way
    rows = [
        {"init": "symmetric", "layers": 12, "objective": "encoder", "characters": False, "seed": seed,
         "horizon": horizon, "speedup": 10.0 + seed, "loss_gap": gap * (1 if horizon == 4_000 else 0.01)}
        for seed, gap in gaps.items() for horizon in (4_000, 15_000)
    ] + [
        {"init": "symmetric", "layers": 12, "objective": "encoder", "characters": False, "seed": 0,
         "horizon": 20_000, "speedup": 1.0, "loss_gap": 0.02},
    ]  # fmt: skip
    found = horizon_summary(pd.DataFrame(rows)).set_index("horizon")
    assert list(found.index) == [4_000, 15_000, 20_000]
    early = found.loc[4_000]
    assert early["seeds"] == 6
    expected = mean_interval(list(gaps.values()))
    assert early["loss_gap"] == pytest.approx(expected.mean)
    assert (early["loss_gap_low"], early["loss_gap_high"]) == pytest.approx((expected.low, expected.high))
    assert early["speedup"] == pytest.approx(12.5) and early["speedup_low"] < 12.5 < early["speedup_high"]
    assert early["loss_gap_p_t"] < 0.001
    assert early["loss_gap_p_sign_flip"] == pytest.approx(2 / 2**6)  # all one way: the exact floor
    assert found.loc[15_000, "loss_gap_p_t"] == pytest.approx(early["loss_gap_p_t"])  # scale-free
    alone = found.loc[20_000]
    assert alone["seeds"] == 1 and alone["loss_gap"] == 0.02
    assert math.isnan(alone["loss_gap_low"]) and math.isnan(alone["loss_gap_p_t"])


def test_the_authors_init_is_compared_with_random_and_with_its_scale_control():
    inits = ("random", "symmetric", "torch_default", "torch_default_symmetric")
    arms = {f"{init}-{seed}": config(init=init, seed=seed) for init in inits for seed in (0, 1)}
    found = {(t.candidate, t.reference): t.effect for t in twins(arms)}
    assert set(found) == {
        (f"{candidate}-{seed}", f"{reference}-{seed}")
        for seed in (0, 1)
        for candidate, reference in (
            ("symmetric", "random"),
            ("torch_default", "random"),
            ("torch_default_symmetric", "random"),
            ("torch_default_symmetric", "torch_default"),
        )
    }
    assert found["torch_default-0", "random-0"] == "init scale alone (PyTorch's default q/k/v)"
    assert found["torch_default_symmetric-1", "torch_default-1"] == "symmetry at the authors' scale"
