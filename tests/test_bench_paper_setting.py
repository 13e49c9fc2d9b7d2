"""The training benchmark's paper rows are the CLI on ``config/paper.yaml``'s training defaults as they are:
run here for real, on the CPU, with a small model."""

from __future__ import annotations

import argparse

import bench_training  # benchmarks/, on the import path through tests/bench_support.py
import paper_setting
import pytest
from bench_support import TINY_MODEL

from attngeom.training.config import make_config, parse_overrides

pytestmark = pytest.mark.slow
SMALL = ("device=cpu", *TINY_MODEL)


def test_the_paper_row_trains_with_the_shipped_training_defaults(bench_cache, tmp_path):
    result = bench_training.attngeom_paper(
        2, 2, bench_cache, tmp_path / "work", settings=(*SMALL, "batch_documents=32")
    )
    assert result["tokens_per_s"] > 0 and "rows of 64 a pass" in result["rows_a_pass"]
    overrides = parse_overrides(
        [*paper_setting.corpus_settings(bench_cache), "n_layers=2", *SMALL, "batch_documents=32"]
    )
    expected = make_config(paper_setting.paper_defaults(), overrides).for_device("cpu")  # as recorded
    recorded = {k: v for k, v in result["settings"].items() if k != "differs_from_paper"}
    assert recorded == expected.to_dict()
    assert recorded["recipe"] == paper_setting.paper_defaults()["recipe"] == "authors_code"
    assert recorded["masking"] == "bernoulli" and recorded["batch_size"] is None  # one pass where it fits


def test_stacked_paper_rows_train_each_run_on_the_same_defaults(bench_cache, tmp_path):
    result = bench_training.attngeom_paper(
        2, 2, bench_cache, tmp_path / "work", 2, (*SMALL, "batch_documents=32")
    )
    assert result["runs"] == 2 and result["tokens_per_s"] > 0
    assert result["settings"]["recipe"] == "authors_code"


def test_run_sets_further_settings_on_the_paper_row_and_names_them(bench_cache, monkeypatch):
    """``bench_training.py run --set NAME=VALUE``: the CLI row trains with it, and its system name says so."""
    monkeypatch.setattr(bench_training, "CACHE", bench_cache)
    monkeypatch.setattr(bench_training, "DEVICE", bench_training.torch.device("cpu"))
    extra = [*TINY_MODEL, "batch_documents=32", "grad_clip=0.5"]
    args = argparse.Namespace(set=extra, paper_steps=2, stack=[], steps=1, warmup=0, batch=2, profile=None)
    result = bench_training.run_system("attngeom-paper", 2, args)
    assert "error" not in result, result.get("error")
    assert result["system"] == " ".join(["attngeom-paper", *extra])
    assert result["settings"]["grad_clip"] == 0.5
