"""attngeom.tables: medians and interquartile distances, the paper-style formats, the reference comparison."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attngeom import tables

ROOT = Path(__file__).resolve().parents[1]


def rows(model: str, stack: str, values: list[float], heads: int = 2) -> list[dict]:
    """Layer rows with the given symmetry (directionality = −symmetry) and per-head rows that must be ignored."""
    out = []
    for layer, value in enumerate(values):
        out.append({"model": model, "stack": stack, "layer": layer, "head": pd.NA, "symmetry": value})
        out += [
            {"model": model, "stack": stack, "layer": layer, "head": h, "symmetry": 9.0} for h in range(heads)
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
                "groups": "table_s2,table_s3",
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
    summary = tables.summarise(scores, models)
    enc = summary[summary["model"] == "enc"].iloc[0]
    assert enc["symmetry_median"] == pytest.approx(np.median(values))
    assert enc["symmetry_minus"] == pytest.approx(np.median(values) - np.percentile(values, 25))
    assert enc["symmetry_plus"] == pytest.approx(np.percentile(values, 75) - np.median(values))
    assert enc["directionality_median"] == pytest.approx(-np.median(values))
    assert list(summary.loc[summary["model"] == "s2s", "stack"]) == ["encoder", "decoder"]  # no cross
    bad = summary[summary["model"] == "bad"].iloc[0]
    assert pd.isna(bad["symmetry_median"]) and bad["reason"] == "gated"
    display = tables.paper_table(summary, "symmetry", "table_s2")
    assert list(display["Model"]) == ["ENC", "S2S (encoder)", "S2S (decoder)", "BAD"]
    assert display["Interquartile range"].iloc[0] == "± [0.20, 0.10]"  # sorted 0.1 0.2 0.4 0.5 0.9
    assert display["Note"].iloc[3] == "not scored: gated"


def test_markdown_and_latex_escape_their_special_characters():
    table = pd.DataFrame({"Max |Δ|": ["a|b"], "Model": ["gpt_2 & co ± 1%"]})
    markdown = tables.to_markdown(table, "T")
    assert "| Max \\|Δ\\| | Model |" in markdown and "a\\|b" in markdown
    latex = tables.to_latex(table, "T")
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
    defects = tables.known_defects(ROOT / "config" / "reference" / "known_defects.csv")
    per_layer, per_model = tables.compare_with_reference(scores, models, reference, defects)
    row = per_model.iloc[0]
    assert row["stack"] == "encoder" and row["n_layers_ours"] == row["n_layers_paper"] == 3
    assert row["symmetry_max_abs_diff"] == pytest.approx(0.05)
    assert row["reference_defect"] == ""
    assert len(per_layer) == 3


def test_known_defects_flag_the_documented_families():
    defects = tables.known_defects(ROOT / "config" / "reference" / "known_defects.csv")
    flagged = {
        model: tables._defect_of(model, defects)
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
    assert tables._defect_of("microsoft/deberta-v2-xlarge", defects) == ""
