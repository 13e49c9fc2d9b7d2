"""Table 1 speed-up, and the training figures and comparison drawn from real (tiny) runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from attngeom.training.config import make_config
from attngeom.training.figures import (
    compare_official,
    evolution_figure,
    load_runs,
    official_figure,
    symmetric_init_figure,
)
from attngeom.training.loop import train
from attngeom.training.runs import RunInfo, Twin, dataset_label, twins
from attngeom.training.speedup import smoothed, speedup, table1


def curve(values) -> pd.DataFrame:
    values = np.asarray(values, dtype=float)
    return pd.DataFrame({"step": np.arange(1, len(values) + 1), "loss": values})


def test_speedup_follows_the_papers_definition():
    random = curve(np.linspace(10, 2, 100))  # final loss 2 at step 100
    faster = curve(np.concatenate([np.linspace(10, 2, 40), np.full(60, 1.5)]))  # reaches 2 at step 40
    assert speedup(random, faster, window=1) == pytest.approx(60.0)
    assert speedup(random, random, window=1) == pytest.approx(0.0)
    assert speedup(random, curve(np.full(100, 3.0)), window=1) == 0.0  # never reaches it


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


def fake_run(folder, dataset, init, losses, objective="encoder"):
    folder.mkdir(parents=True)
    config = make_config({"dataset": dataset, "init": init, "objective": objective})
    (folder / "config.yaml").write_text(yaml.safe_dump(config.to_dict()))
    curve(losses).to_parquet(folder / "loss.parquet")
    return folder


def test_table1_pairs_symmetric_runs_with_their_random_twin_and_the_paper(tmp_path):
    runs = [
        fake_run(tmp_path / "r", "jigsaw", "random", np.linspace(10, 2, 100)),
        fake_run(
            tmp_path / "s", "jigsaw", "symmetric", np.concatenate([np.linspace(10, 2, 50), np.full(50, 1.0)])
        ),
        fake_run(tmp_path / "d", "jigsaw", "random", np.linspace(9, 3, 100), objective="decoder"),
    ]
    paper = pd.read_csv("config/reference/paper_table1_symmetric_init.csv")
    table = table1(runs, paper).set_index("run")
    assert table.loc["s", "speedup_percent"] > 40
    assert table.loc["s", "random_twin"] == "r"
    assert np.isnan(table.loc["r", "speedup_percent"])
    assert table.loc["s", "paper_speedup_percent"] == 26  # 4-layer jigsaw (+ symm) in the paper
    assert np.isnan(table.loc["d", "paper_loss"])  # Table 1 has no decoders


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    corpus = root / "corpus.txt"
    rng = np.random.default_rng(0)
    words = np.array("the a nation people congress state war peace law union free trade".split())
    corpus.write_text("\n".join(" ".join(rng.choice(words, 20)) for _ in range(300)) + "\n")
    base = dict(
        dataset=str(corpus), cache_dir=str(root / "cache"), n_layers=2, hidden_size=32, n_heads=4,
        intermediate_size=64, seq_len=32, vocab_size=200, batch_size=4, grad_accum=1, steps=6, score_every=3,
    )  # fmt: skip
    runs = []
    for objective, init in (("encoder", "random"), ("encoder", "symmetric"), ("decoder", "random")):
        config = make_config(base, {"objective": objective, "init": init})
        runs.append(train(config, root / f"{objective}-{init}", progress=False))
    return runs


def test_figures_are_written_as_pdf_and_png(tiny_runs, tmp_path):
    scores, losses = load_runs(tiny_runs)
    assert set(scores["step"]) == {0, 3, 6}
    evolution_figure(scores, "corpus", 2, tmp_path / "evolution")
    symmetric_init_figure(scores, losses, "corpus", 2, "encoder", tmp_path / "s5")
    official = pd.read_csv("config/reference/official_training_evolution.csv")
    official_figure(scores, official, tmp_path / "official")
    written = sorted(tmp_path.iterdir())
    assert [p.name for p in written] == [
        f"{s}.{e}" for s in ("evolution", "official", "s5") for e in ("pdf", "png")
    ]
    assert all(p.stat().st_size > 1000 for p in written)


def test_runs_are_tagged_from_their_config_yaml_and_twins_marked(tiny_runs):
    scores, losses = load_runs(tiny_runs)
    assert {"training_objective"}.isdisjoint(scores.columns)
    tags = scores.drop_duplicates("run").set_index("run")
    assert tags.loc["encoder-symmetric", "init"] == "symmetric"
    assert tags.loc["decoder-random", "objective"] == "decoder"
    assert tags["twin"].to_dict() == {
        "encoder-random": "encoder-symmetric",
        "encoder-symmetric": "encoder-symmetric",
        "decoder-random": None,
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


def config(**settings):
    return make_config({"dataset": "sotu", "n_layers": 4}, settings)


def test_twins_pair_runs_that_differ_only_in_init_from_configs_alone():
    configs = {
        "r0": config(seed=0),
        "s0": config(
            seed=0, init="symmetric", score_every=7, device="cpu"
        ),  # bookkeeping differs: still twins
        "r1": config(seed=1),
        "s1": config(seed=1, init="symmetric"),
        "s-other-lr": config(init="symmetric", lr=1e-3),  # no random run with this lr
        "s-reg": config(init="symmetric", reg_weight=0.1),  # regularised: never a twin
        "r-dec": config(objective="decoder"),
        "s-skew": config(init="skew"),
    }
    assert twins(configs) == [
        Twin("r0", "s0", "sotu", 4, "encoder", 0),
        Twin("r1", "s1", "sotu", 4, "encoder", 1),
    ]
    assert twins({"only": config()}) == []
