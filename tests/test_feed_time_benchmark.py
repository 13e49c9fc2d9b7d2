"""The feed benchmark times the CLI's feed and transformers' masked-LM collator on the same documents: here,
for real, on the CPU, on a small stand-in of the offline corpus."""

from __future__ import annotations

import json
from pathlib import Path

import feed_time  # benchmarks/, on the import path through tests/bench_support.py
from paper_setting import corpus_settings, paper_defaults

from attngeom.training.config import make_config, parse_overrides
from attngeom.training.corpus import load_corpus
from attngeom.training.document_batches import DocumentBatches


def test_the_peer_collates_the_updates_own_documents_one_padded_row_each(bench_cache):
    config = make_config(
        paper_defaults(), parse_overrides([*corpus_settings(bench_cache), "batch_documents=16"])
    )
    batches = DocumentBatches(load_corpus(config, progress=False), config)
    batch = feed_time.collator_peer(batches, Path(config.tokenizer))(3)
    ids, labels = batch["input_ids"], batch["labels"]
    assert tuple(ids.shape) == (16, config.seq_len)
    real = batch["attention_mask"].bool()
    assert int(real.sum()) == batches.update(3).tokens  # the same documents, [CLS] and [SEP] included
    assert (labels[~real] == -100).all() and (labels[real] != -100).any()


def test_the_benchmark_prints_both_feeds_figures(bench_cache, tmp_path, capsys):
    argv = ["--cache", str(bench_cache), "--updates", "2", "--repeats", "1", "--set", "batch_documents=16"]
    result = feed_time.main([*argv, "--out", str(tmp_path / "feed.json")])
    printed = capsys.readouterr().out
    assert "DocumentBatches.update" in printed and "DataCollatorForLanguageModeling" in printed
    assert result["attngeom_ms_per_update"] > 0 and result["collator_ms_per_update"] > 0
    assert json.loads((tmp_path / "feed.json").read_text())["batch_documents"] == 16
