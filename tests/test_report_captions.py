"""What the report's captions say a run can show (attngeom.pipeline.captions), worked out from configs,
and the nearest published model named when a comparison has nothing to compare."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from attngeom.pipeline.captions import (
    PLATEAU_EXITS,
    PLATEAU_STEPS,
    models_scope,
    nearest_published,
    official_scope,
    seeds_per_setting,
    training_scope,
)
from attngeom.pipeline.registry import build_registry
from attngeom.pipeline.training_runs import training_models, training_runs
from attngeom.runstats.official import published_settings

ROOT = Path(__file__).resolve().parents[1]
OFFICIAL = published_settings(ROOT / "config" / "reference" / "official_training_evolution.csv")
DEFAULTS = {"dataset": "sotu", "n_layers": 2, "hidden_size": 32, "n_heads": 4, "intermediate_size": 64}
RUNS = [
    {"name": "enc-r", "objective": "encoder", "init": "random"},
    {"name": "enc-s", "objective": "encoder", "init": "symmetric"},
]


def runs(seeds=None, **settings):
    return training_runs({"defaults": {**DEFAULTS, **settings}, "runs": RUNS, "seeds": seeds}, "r")


def test_short_runs_are_called_a_test_of_the_machinery_not_evidence():
    text = training_scope(runs(seeds=2, steps=300))
    assert "2 seed(s) per setting" in text and "2-layer on sotu, 300 steps" in text
    assert "too short to show the effect" in text and "not as evidence" in text
    assert f"plateau at steps {PLATEAU_EXITS[0]:,}–{PLATEAU_EXITS[1]:,}" in text
    assert seeds_per_setting(runs(seeds=3, steps=300).values()) == 3


def test_long_runs_with_one_seed_cannot_tell_an_effect_from_noise_and_with_seeds_defer_to_the_verdict():
    one = training_scope(runs(steps=PLATEAU_STEPS * 2))
    assert "one seed per setting no interval can be computed" in one
    several = training_scope(runs(seeds=3, steps=PLATEAU_STEPS * 2))
    assert "when each run left the masked-LM plateau" in several and "too short" not in several
    assert training_scope({}) == "This run trains no model."


def test_the_official_comparison_names_the_nearest_published_run_or_says_all_match():
    text = official_scope(runs(steps=300), OFFICIAL)
    assert "no 2-layer encoder run on sotu" in text and "their 4-layer encoder on jigsaw" in text
    matching = training_runs(
        {"defaults": {"dataset": "jigsaw", "n_layers": 4}, "runs": [RUNS[0]]},
        "r",
    )
    assert (
        official_scope(matching, OFFICIAL)
        == "Every run here has a published counterpart of the same setting."
    )


def test_model_captions_count_pretrained_models_controls_and_trained_runs_apart():
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    trained = training_runs(config["training"], "results/training")
    models = build_registry(
        config["models"] + training_models(trained, "results/training"), "results"
    ).values()
    s2 = models_scope(models, "table_s2")
    assert "1 decoder-only, 1 encoder-only pretrained model(s)" in s2
    assert "3 random-initialised control(s)" in s2 and f"{len(trained)} model(s) trained here" in s2
    assert "the trend over model sizes needs" in s2 and "It can show the contrast" not in s2
    assert "exceeds the spread of the random controls is said under Table S2" in s2
    assert f"{len(trained)} of the trained models are marked 'smoke test'" in s2  # the default's 300 steps
    s1 = models_scope(models, "figure_s1")
    assert "no pretrained model" in s1 and "cannot show what the paper shows" in s1
    only_encoders = [m for m in models if m.objective == "bidirectional"]
    assert "cannot show the contrast" in models_scope(only_encoders, "figure_2")


def test_an_empty_reference_comparison_names_the_nearest_published_model_of_the_same_kind():
    reference = pd.read_csv(ROOT / "config" / "reference" / "official_per_layer_scores.csv")
    models = pd.DataFrame(
        [
            {
                "model": "mine/enc",
                "display": "my encoder",
                "modality": "language",
                "objective": "bidirectional",
            },
            {"model": "mine/ctl", "display": "control", "modality": "language", "objective": "bidirectional"},
        ]
    ).assign(role=["pretrained", "random"], status="ok", n_params=[4.4e6, 4.4e6])
    text = nearest_published(models, reference)
    published = reference[reference["model_id"] == "google/bert_uncased_L-2_H-128_A-2"]
    assert "my encoder (4.4M): google/bert_uncased_L-2_H-128_A-2 (4.39M;" in text  # BERT-tiny: nearest size
    assert f"median symmetry {published['symmetry'].median():.2f}" in text
    assert "control" not in text  # a random control is not compared with a pretrained model
    assert nearest_published(models.assign(role="random"), reference) == ""


class _Anything:
    """Stands for a rule's params and wildcards when a caption template is rendered: every name is a
    plain sentence, as the captions module's are."""

    def __getattr__(self, name: str) -> str:
        return f"The run's {name}: 3 models, 4-layer on sotu."


def test_every_caption_renders_without_a_docutils_system_message():
    """Snakemake renders each caption with Jinja, then as reStructuredText: an undefined substitution
    (``|value|``) or a broken inline markup shows as an error block in the report."""
    import io

    import jinja2
    from docutils.core import publish_doctree

    def messages(text: str) -> str:
        stream = io.StringIO()
        publish_doctree(
            text, settings_overrides={"warning_stream": stream, "report_level": 2, "halt_level": 5}
        )
        return stream.getvalue()

    captions = sorted((ROOT / "workflow" / "report").glob("*.rst"))
    assert len(captions) >= 10
    figure = type("Output", (), {"pdf": "results/figures/figure.pdf"})()  # a table's output has no pdf
    for output in (figure, object()):
        job = {
            "params": _Anything(),
            "wildcards": _Anything(),
            "config": {"results": "results"},
            "output": output,
        }
        snakemake = type("Job", (), job)()
        for caption in captions:
            text = jinja2.Template(caption.read_text()).render(snakemake=snakemake)
            assert messages(text) == "", caption.name
            if output is figure and "snakemake.output.pdf" in caption.read_text():  # the PDF linked
                assert "<figures/figure.pdf>`_" in text, caption.name
    assert "Undefined substitution" in messages("percentile of |value|.")  # the check sees what it guards


def test_the_quoted_plateau_exits_are_those_of_the_committed_gpu_encoders_logs():
    from attngeom.runstats.plateau import plateau_exits

    runs = ROOT / "benchmarks" / "results" / "training_repro_seeds" / "runs"
    logs = [pd.read_parquet(runs / f"encoder-random-s{s}" / "loss.parquet") for s in range(3)]
    level, exits = plateau_exits(logs)
    assert (min(exits), max(exits)) == PLATEAU_EXITS and 5 < level < 6  # one loss for all three
    still = ROOT / "benchmarks" / "results" / "training_repro_3k" / "encoder-random" / "loss.parquet"
    assert plateau_exits([pd.read_parquet(still)]) == (None, [None])  # lr 5e-4, 3,000 steps: never left it
    flat = pd.DataFrame({"step": range(1, 101), "loss": [6.0] * 100})
    assert plateau_exits([flat]) == (None, [None])
