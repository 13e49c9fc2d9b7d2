"""attngeom.report: medians and interquartile distances, the paper-style formats, the reference comparison."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attngeom.report import reference_comparison, tables_s2_s3
from attngeom.report.summary import collect, in_group, read_table, summarise
from attngeom.tables import formats
from attngeom.tables.formats import write_csv

ROOT = Path(__file__).resolve().parents[1]


def rows(model: str, stack: str, values: list[float], heads: int = 2) -> list[dict]:
    """Layer rows with the given symmetry (directionality = −symmetry) and per-head rows that must be ignored."""
    out = []
    for layer, value in enumerate(values):
        out.append({"model_id": model, "stack": stack, "layer": layer, "head": pd.NA, "symmetry": value})
        out += [
            {"model_id": model, "stack": stack, "layer": layer, "head": h, "symmetry": 9.0}
            for h in range(heads)
        ]
    frame = pd.DataFrame(out)
    frame["head"] = frame["head"].astype("Int64")
    frame["directionality"] = -frame["symmetry"]
    return frame.to_dict("records")


def models_table(*entries: tuple[str, str, str, str]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "model": model,
                "display": model.upper(),
                "family": "f",
                "modality": "language",
                "objective": objective,
                "role": "pretrained",
                "groups": ["table_s2", "table_s3"],
                "n_params": 1e8,
                "slug": model,
                "status": status,
                "reason": reason,
            }
            for model, objective, status, reason in entries
        ]
    )


def test_summary_is_median_and_interquartile_distances_of_layer_rows_only():
    values = [0.1, 0.5, 0.2, 0.9, 0.4]
    scores = pd.DataFrame(
        rows("enc", "encoder", values) + rows("s2s", "encoder", [0.3, 0.3]) + rows("s2s", "cross", [0.8, 0.8])
    )
    scores = pd.concat([scores, pd.DataFrame(rows("s2s", "decoder", [0.0, 0.2]))], ignore_index=True)
    models = models_table(
        ("enc", "bidirectional", "ok", ""),
        ("s2s", "encoder-decoder", "ok", ""),
        ("bad", "autoregressive", "failed", "gated"),
    )
    summary = summarise(scores, models)
    enc = summary[summary["model"] == "enc"].iloc[0]
    assert enc["symmetry_median"] == pytest.approx(np.median(values))
    assert enc["symmetry_minus"] == pytest.approx(np.median(values) - np.percentile(values, 25))
    assert enc["symmetry_plus"] == pytest.approx(np.percentile(values, 75) - np.median(values))
    assert enc["directionality_median"] == pytest.approx(-np.median(values))
    assert list(summary.loc[summary["model"] == "s2s", "stack"]) == ["encoder", "decoder"]  # no cross
    bad = summary[summary["model"] == "bad"].iloc[0]
    assert pd.isna(bad["symmetry_median"]) and bad["reason"] == "gated"
    side_by_side, other = tables_s2_s3.blocks(tables_s2_s3.long_table(summary, "symmetry"), "symmetry")
    assert list(side_by_side.table["Encoder-only model"]) == ["ENC"]
    assert list(side_by_side.table["Decoder-only model"]) == ["BAD"]
    assert side_by_side.table["Interquartile range"].iloc[0, 0] == "± [0.20, 0.10]"  # 0.1 0.2 0.4 0.5 0.9
    assert side_by_side.notes == ("BAD: not scored: gated",)
    assert list(other.table["Model"]) == ["S2S (encoder)", "S2S (decoder)"]


def test_markdown_and_latex_escape_their_special_characters():
    table = pd.DataFrame({"Max |Δ|": ["a|b"], "Model": ["gpt_2 & co ± 1%"]})
    _, _, header, rule, row = formats.to_markdown(table, "T").splitlines()

    def cells(line: str) -> list[str]:  # split at the pipes that are not escaped
        return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]

    assert cells(header) == ["Max \\|Δ\\|", "Model"] and cells(row) == ["a\\|b", "gpt_2 & co ± 1%"]
    assert set(rule) <= set("|-: ")
    latex = formats.to_latex(table, "T")
    assert r"gpt\_2 \& co $\pm$ 1\%" in latex and r"\toprule" in latex


def test_comparison_matches_a_one_stack_reference_to_the_stack_of_the_same_depth():
    scores = pd.DataFrame(rows("facebook/s2t-small-librispeech-asr", "encoder", [0.1, 0.2, 0.3]))
    scores = pd.concat(
        [scores, pd.DataFrame(rows("facebook/s2t-small-librispeech-asr", "decoder", [0.5, 0.5]))],
        ignore_index=True,
    )
    reference = pd.DataFrame(
        {
            "model_id": ["facebook/s2t-small-librispeech-asr"] * 3,
            "stack": [np.nan] * 3,
            "layer": [0, 1, 2],
            "symmetry": [0.1, 0.25, 0.3],
            "directionality": [-0.1, -0.2, -0.3],
        }
    )
    models = models_table(("facebook/s2t-small-librispeech-asr", "encoder-decoder", "ok", ""))
    defects = reference_comparison.known_defects(ROOT / "config" / "reference" / "known_defects.csv")
    per_layer, per_model = reference_comparison.compare_with_reference(scores, models, reference, defects)
    row = per_model.iloc[0]
    assert row["stack"] == "encoder" and row["n_layers_ours"] == row["n_layers_paper"] == 3
    assert row["symmetry_max_abs_diff"] == pytest.approx(0.05)
    assert row["reference_defect"] == ""
    assert len(per_layer) == 3


def test_known_defects_flag_the_documented_families():
    defects = reference_comparison.known_defects(ROOT / "config" / "reference" / "known_defects.csv")
    flagged = {
        model: reference_comparison._defect_of(model, defects)
        for model in (
            "meta-llama/Llama-3.1-8B",
            "EleutherAI/pythia-70m",
            "microsoft/deberta-base",
            "bert-base-uncased",
        )
    }
    assert "grouped-query" in flagged["meta-llama/Llama-3.1-8B"]
    assert "fused" in flagged["EleutherAI/pythia-70m"] and "fused" in flagged["microsoft/deberta-base"]
    assert flagged["bert-base-uncased"] == ""
    assert reference_comparison._defect_of("microsoft/deberta-v2-xlarge", defects) == ""


def test_collect_joins_scores_to_models_by_id_not_by_position(tmp_path):
    from attngeom.records import write_scores

    models = [
        {"model": m, "display": m, "groups": ["table_s2"], "slug": m, "n_params": None}
        for m in ("a", "b", "c")
    ]
    paths, statuses = [], []
    for model in ("c", "a"):  # not the registry's order, and "b" was not scored
        rows = pd.DataFrame(rows_for_records(model))
        paths.append(write_scores(rows, tmp_path / f"{model}.parquet"))
        statuses.append(tmp_path / f"{model}.json")
        statuses[-1].write_text(f'{{"model": "{model}", "status": "ok"}}')
    (tmp_path / "b.parquet").write_bytes(b"")
    statuses.append(tmp_path / "b.json")
    statuses[-1].write_text('{"model": "b", "status": "crashed", "reason": "ValueError: boom"}')
    scores, table = collect(models, paths, statuses)
    assert list(table["model"]) == ["a", "b", "c"]
    assert list(table["status"]) == ["ok", "crashed", "ok"]
    assert table.loc[0, "n_params"] == 1000 and pd.isna(table.loc[1, "n_params"])
    assert set(scores["model_id"]) == {"a", "c"}
    summary = summarise(scores, table)
    assert summary.loc[summary["model"] == "a", "symmetry_median"].iloc[0] == pytest.approx(0.2)
    assert summary.loc[summary["model"] == "c", "symmetry_median"].iloc[0] == pytest.approx(0.3)


def rows_for_records(model: str) -> list[dict]:
    """Two layer rows of a one-head model, every column of the records schema."""
    value = {"a": 0.2, "c": 0.3}[model]
    common = {
        **dict(model_id=model, revision=None, file_hash="0", source_dtype="float32", model_type="bert"),
        "modality": "language",
        **dict(
            objective="bidirectional", stack="encoder", n_heads=1, n_kv_heads=1, head_dim=4, hidden_size=4
        ),
        **dict(n_params=1000, norm=1.0, left_out="", form="standard", not_scored=None, variant="excess"),
        "attngeom_version": "0",
        "code_hash": "0",
    }
    return [
        {**common, "layer": layer, "head": head, "kv_head": head, "symmetry": value, "directionality": 0.0}
        for layer in (0, 1)
        for head in (None, 0)
    ]


def test_groups_are_a_list_in_memory_and_readable_in_the_csv(tmp_path):
    table = models_table(("enc", "bidirectional", "ok", ""), ("dec", "autoregressive", "failed", "x"))
    table.loc[1, "groups"] = ["table_s3"]
    write_csv(table, tmp_path / "models.csv")
    assert "table_s2,table_s3" in (tmp_path / "models.csv").read_text()
    back = read_table(tmp_path / "models.csv")
    assert list(back["groups"]) == [["table_s2", "table_s3"], ["table_s3"]]
    assert list(in_group(back, "table_s2")["model"]) == ["enc"]
    assert list(in_group(back, "table_s3")["model"]) == ["enc", "dec"]


def test_an_empty_table_of_arrow_strings_is_a_csv_with_its_header(tmp_path):
    """Parquet read back gives Arrow-backed strings; an empty column of them has no 'any' to reduce."""
    table = pd.DataFrame(
        {"model": pd.Series([], dtype="string[pyarrow]"), "score": pd.Series([], dtype=float)}
    )
    write_csv(table, tmp_path / "empty.csv")
    assert (tmp_path / "empty.csv").read_text().splitlines() == ["model,score"]


def test_an_empty_comparison_is_a_csv_with_its_header_and_says_why(tmp_path):
    models = models_table(("not-in-the-paper", "bidirectional", "ok", ""))
    scores = pd.DataFrame(rows("not-in-the-paper", "encoder", [0.1, 0.2]))
    reference = pd.read_csv(ROOT / "config" / "reference" / "official_per_layer_scores.csv")
    per_layer, per_model = reference_comparison.compare_with_reference(scores, models, reference, [])
    assert per_model.empty and per_layer.empty
    formats.write_table(
        reference_comparison.comparison_display(per_model),
        tmp_path / "cmp",
        "T",
        csv=per_model,
        empty=reference_comparison.NOTHING_TO_COMPARE,
    )
    read = pd.read_csv(tmp_path / "cmp.csv")
    assert read.empty and list(read.columns) == reference_comparison.COMPARISON_COLUMNS
    for suffix in (".md", ".tex"):
        assert "nothing to compare" in (tmp_path / f"cmp{suffix}").read_text()


def test_the_cli_summary_is_the_tables_statistics():
    from attngeom.cli import summary

    frame = pd.DataFrame(rows("m", "encoder", [0.1, 0.5, 0.2, 0.9]) + rows("m", "decoder", [0.3, 0.4]))
    shown = summary(frame)
    assert list(shown.index) == ["encoder", "decoder"]
    assert shown.loc["encoder", "layers"] == 4
    assert shown.loc["encoder", "symmetry median"] == pytest.approx(np.median([0.1, 0.5, 0.2, 0.9]))
    iqr = np.percentile([0.1, 0.5, 0.2, 0.9], 75) - np.percentile([0.1, 0.5, 0.2, 0.9], 25)
    assert shown.loc["encoder", "symmetry IQR"] == pytest.approx(iqr)
    assert shown.loc["decoder", "directionality median"] == pytest.approx(-0.35)


def test_when_no_model_could_be_scored_the_tables_still_list_every_model_and_why(tmp_path):
    from attngeom.records import read_scores, write_scores

    models = [{"model": m, "display": m, "groups": ["table_s2"], "slug": m} for m in ("a", "b")]
    statuses = []
    for model, status in (("a", "failed"), ("b", "crashed")):
        statuses.append(tmp_path / f"{model}.json")
        statuses[-1].write_text(f'{{"model": "{model}", "status": "{status}", "reason": "why {model}"}}')
    scores, table = collect(models, [], statuses)
    write_scores(scores, tmp_path / "all.parquet")
    summary = summarise(read_scores(tmp_path / "all.parquet"), table)
    assert list(summary["reason"]) == ["why a", "why b"] and summary["symmetry_median"].isna().all()
    summary = summary.assign(objective="bidirectional", role="pretrained", modality="language")
    (block,) = tables_s2_s3.blocks(tables_s2_s3.long_table(summary, "symmetry"), "symmetry")
    assert block.notes == ("a: not scored: why a", "b: not scored: why b")
    assert list(block.table["Median"].iloc[:, 0]) == ["not scored", "not scored"]  # the encoder side


def summary_row(model: str, objective: str, role: str, modality: str = "language", stack: str = "encoder"):
    return {
        "model": model,
        "display": model,
        "modality": modality,
        "objective": objective,
        "role": role,
        "groups": ["table_s2", "table_s3"],
        "n_params": 1e8,
        "status": "ok",
        "reason": "",
        "stack": stack,
        "n_layers": 2,
        **{
            f"{m}_{w}": v
            for m in ("symmetry", "directionality")
            for w, v in (("median", 0.5), ("minus", 0.1), ("plus", 0.2))
        },
    }


def test_tables_s2_s3_put_each_kind_and_role_in_its_own_block_as_the_paper_does(tmp_path):
    summary = pd.DataFrame(
        [
            summary_row("trained/encoder-symmetric-s0", "bidirectional", "trained"),
            summary_row("bert", "bidirectional", "pretrained"),
            summary_row("random/gpt2", "autoregressive", "random"),
            summary_row("gpt2", "autoregressive", "pretrained"),
            summary_row("llama", "autoregressive", "pretrained"),
            summary_row("t5", "encoder-decoder", "pretrained", stack="encoder"),
            summary_row("t5", "encoder-decoder", "pretrained", stack="decoder"),
            summary_row("vit", "bidirectional", "pretrained", modality="vision"),
        ]
    )
    tables_s2_s3.write(summary, "directionality", ["excess"], tmp_path / "table_s3")
    long = pd.read_csv(tmp_path / "table_s3.csv")
    assert list(long["block"].drop_duplicates()) == [
        tables_s2_s3.SIDE_BY_SIDE,
        "Other pretrained models: language, encoder-decoder",
        "Other pretrained models: vision, encoder-only",
        tables_s2_s3.CONTROLS,
        tables_s2_s3.TRAINED,
    ]
    roles = dict(zip(long["model"], long["role"], strict=True))
    assert roles["bert"] == "pretrained" and roles["random/gpt2"] == "random control"
    assert roles["trained/encoder-symmetric-s0"] == "trained here"
    side = tables_s2_s3.blocks(tables_s2_s3.long_table(summary, "directionality"), "directionality")[0].table
    assert list(side["Encoder-only model"]) == ["bert", ""]  # padded: two decoders beside one encoder
    assert list(side["Decoder-only model"]) == ["gpt2", "llama"]
    markdown = (tmp_path / "table_s3.md").read_text()
    assert "excess of each row (column) norm over μ + 2σ" in markdown
    assert "± [a, b] the interquartile distances over layers" in markdown
    assert markdown.index("## Pretrained language models") < markdown.index("## Random-initialised controls")
    latex = (tmp_path / "table_s3.tex").read_text()
    assert latex.count(r"\begin{tabular}") == 5 and "excess of each row" in latex
    assert "variant" not in tables_s2_s3.caption("symmetry", ["excess"])
    assert "Eq. 17" in tables_s2_s3.caption("directionality", ["eq17"])


def test_the_encoder_decoder_contrast_is_claimed_only_when_it_beats_the_random_controls():
    def row(model, objective, role, median, minus=0.05, plus=0.05):
        base = summary_row(model, objective, role)
        return base | {
            "directionality_median": median,
            "directionality_minus": minus,
            "directionality_plus": plus,
        }

    # the embedded default's numbers: −0.10 vs −0.24 against controls spanning −0.18 to +0.13
    within = pd.DataFrame(
        [
            row("minilm", "bidirectional", "pretrained", -0.10),
            row("smollm2", "autoregressive", "pretrained", -0.24),
            row("random/minilm", "bidirectional", "random", -0.05, 0.13, 0.10),
            row("random/smollm2", "autoregressive", "random", 0.0, 0.05, 0.13),
        ]
    )
    long = tables_s2_s3.long_table(within, "directionality")
    note = tables_s2_s3.contrast_note(long, "directionality")
    assert "-0.10 vs decoder-only -0.24" in note and "span -0.18 to +0.13" in note
    assert "within the controls' spread: these models cannot show it" in note
    wide = within.assign(directionality_median=[0.6, -0.6, -0.05, 0.0])
    assert "exceeds the controls' spread" in tables_s2_s3.contrast_note(
        tables_s2_s3.long_table(wide, "directionality"), "directionality"
    )
    alone = within[within["role"] == "pretrained"]
    assert "no contrast is claimed" in tables_s2_s3.contrast_note(
        tables_s2_s3.long_table(alone, "directionality"), "directionality"
    )


def test_smoke_test_runs_are_marked_in_the_tables_and_the_captions_say_so():
    from attngeom.pipeline.captions import models_scope
    from attngeom.pipeline.registry import build_registry
    from attngeom.pipeline.training_runs import training_models, training_runs
    from attngeom.runstats.plateau import SMOKE_TEST_STEPS

    def runs(steps):
        defaults = {
            "dataset": "sotu",
            "n_layers": 2,
            "hidden_size": 32,
            "n_heads": 4,
            "intermediate_size": 64,
        }
        defaults["steps"] = steps
        spec = {"defaults": defaults, "runs": [{"name": "enc-r", "objective": "encoder", "init": "random"}]}
        return training_runs(spec, "r")

    (short,) = training_models(runs(300), "r")
    assert short["display"] == "enc-r [smoke test: 300 steps]"
    (long_run,) = training_models(runs(SMOKE_TEST_STEPS), "r")
    assert long_run["display"] == "enc-r"
    models = build_registry([short], "r").values()
    text = models_scope(models, "table_s2")
    assert "1 of the trained models are marked 'smoke test'" in text and "say nothing about" in text


DECODER_LOSS_RUNS = [
    {"name": f"{objective}{'-' + loss if loss else ''}-{init}", "objective": objective, "init": init}
    | ({"decoder_loss": loss} if loss else {})
    for objective, loss in (("encoder", None), ("decoder", "causal"), ("decoder", "masked"))
    for init in ("random", "torch_default_symmetric")
]


def test_a_decoder_s_two_losses_get_a_figure_s5_each_and_the_pipeline_plans_both(tmp_path):
    """The two decoder losses train different models: Figure S5 never puts them in one figure."""
    import yaml
    from pipeline_support import TINY_MODELS, planned_jobs, run_snakemake, write_config

    from attngeom.pipeline.training_runs import symmetric_groups, trained_objective, training_runs

    defaults = {"dataset": "sotu", "steps": 3, "n_layers": 2, "hidden_size": 8, "n_heads": 2}
    defaults |= {"intermediate_size": 8, "device": "cpu"}
    spec = {"defaults": defaults, "runs": DECODER_LOSS_RUNS}
    runs = training_runs(spec, "results")
    assert trained_objective(runs["decoder-masked-random"]) == "decoder_masked"
    assert trained_objective(runs["encoder-random"]) == "encoder"
    groups = symmetric_groups(runs)
    assert [objective for _, _, objective in groups] == ["decoder_causal", "decoder_masked", "encoder"]

    config = yaml.safe_load(write_config(tmp_path / "c.yaml", TINY_MODELS).read_text())
    config["training"] = spec
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    done = run_snakemake("all", "-n", "--configfile", "c.yaml", cwd=tmp_path)
    figures = sorted(w for rule, w, _ in planned_jobs(done.stdout) if rule == "symmetric_init_figure")
    assert [re.search(r"objective=(\w+)", w)[1] for w in figures] == [
        "decoder_causal",
        "decoder_masked",
        "encoder",
    ]


@pytest.mark.slow  # two tiny decoder runs trained, scored and drawn through the workflow (about a minute)
def test_a_decoder_figure_s5_is_drawn_from_its_own_loss_runs_by_the_workflow(tmp_path):
    """The decoder Figure S5 path for real: asked for the masked-loss decoders' figure, the workflow trains
    those two runs (not the causal-loss ones configured beside them), scores them and draws it."""
    import yaml
    from pipeline_support import TINY_MODELS, run_snakemake, write_config
    from training_fixtures import TINY, write_corpus

    from attngeom.pipeline.training_runs import symmetric_groups, training_runs

    defaults = {**TINY, "dataset": str(write_corpus(tmp_path)), "cache_dir": str(tmp_path / "cache")}
    defaults |= {"batch_size": 4, "grad_accum": 1, "steps": 4, "warmup_steps": 1, "threads": 1}
    defaults |= {"log_every": 2, "score_every": 2, "checkpoint_every": 4, "device": "cpu"}
    runs = [r for r in DECODER_LOSS_RUNS if r["objective"] == "decoder"]
    spec = {"defaults": defaults, "runs": runs}
    groups = symmetric_groups(training_runs(spec, "results"))
    ((dataset, layers, objective),) = [g for g in groups if g[2] == "decoder_masked"]
    config = yaml.safe_load(write_config(tmp_path / "c.yaml", TINY_MODELS).read_text())
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config | {"training": spec}))
    stem = f"results/training/figures/symmetric_init_{dataset}_{layers}L_{objective}"
    run_snakemake(f"{stem}.pdf", f"{stem}.png", "--cores", "1", "--configfile", "c.yaml", cwd=tmp_path)

    assert (tmp_path / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
    trained = sorted(
        p.name for p in (tmp_path / "results" / "training").iterdir() if (p / "loss.parquet").is_file()
    )
    assert trained == ["decoder-masked-random", "decoder-masked-torch_default_symmetric"]
    log = tmp_path / f"results/training/logs/symmetric_init_figure/{dataset}_{layers}L_{objective}.log"
    assert "symmetric_init_figure: 2 runs drawn" in log.read_text()
