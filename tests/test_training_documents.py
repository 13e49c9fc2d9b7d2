"""Updates counted in documents (``batch_documents``): every document whole and once, packed, masked (CPU)."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from attngeom.training.batch import IGNORED
from attngeom.training.config import ConfigError, make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.document_batches import DocumentBatches, pack_first_fit
from attngeom.training.document_mask import document_ids
from attngeom.training.loop import make_optimizer, train
from attngeom.training.model import build_model
from attngeom.training.step import TrainStep

TINY = dict(n_layers=2, hidden_size=32, n_heads=4, intermediate_size=64, seq_len=48, vocab_size=301)
WORDS = "the a nation people congress state war peace law union free trade tax year work we our".split()


def documents_corpus(path, seed: int) -> str:
    """200 documents of 1 to 70 words, one a line (some fill a row, most share one)."""
    rng = random.Random(seed)
    lines = [" ".join(rng.choices(WORDS, k=rng.choice([1, 3, 9, 20, 70]))) for _ in range(200)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.fixture
def config(tmp_path):
    path = documents_corpus(tmp_path / "corpus.txt", seed=3)
    settings = dict(TINY, dataset=path, cache_dir=str(tmp_path / "cache"), batch_size=4)
    return make_config(settings, {"batch_documents": 16, "dropout": 0.0, "steps": 3, "warmup_steps": 1})


def corpus_documents(corpus, sep: int) -> list[list[int]]:
    stream = np.asarray(corpus.tokens).tolist()
    docs, current = [], []
    for token in stream:
        if token == sep:
            docs.append(current)
            current = []
        else:
            current.append(token)
    return docs


@pytest.mark.parametrize("seed", range(5))
def test_first_fit_places_every_item_once_within_capacity_in_few_rows(seed):
    lengths = np.random.default_rng(seed).integers(1, 60, size=200)
    rows = pack_first_fit(lengths, 64)
    assert sorted(i for row in rows for i in row) == list(range(200))
    assert all(lengths[row].sum() <= 64 for row in rows)
    fewest = -(-lengths.sum() // 64)
    assert len(rows) <= 11 / 9 * fewest + 1
    row_of = {item: number for number, row in enumerate(rows) for item in row}
    room = [64] * len(rows)
    for item in np.argsort(-lengths, kind="stable"):  # longest first, ties in order: the first row with room
        assert row_of[item] == next(r for r, free in enumerate(room) if free >= lengths[item] or free == 64)
        room[row_of[item]] -= lengths[item]


def test_an_update_holds_its_documents_whole_truncated_and_once(config):
    corpus = load_corpus(config, progress=False)
    batches = DocumentBatches(corpus, config)
    sep, cls, pad = batches.sep, batches.cls, batches.pad
    docs = [d for d in corpus_documents(corpus, sep) if d]
    for step in (0, 5):
        rows = batches.layout(step)[0]
        assert rows.shape[0] < config.batch_documents  # packed: fewer rows than documents
        passes = batches.update(step).micro_batches
        assert len({len(b.input_ids) for b in passes}) == 1 and len(passes[0].input_ids) <= config.batch_size
        assert len(passes) == -(-len(rows) // config.batch_size)  # as few passes as batch_size allows
        found = []
        for row, owner in zip(rows.tolist(), document_ids(rows, sep).tolist(), strict=True):
            pieces: dict[int, list[int]] = {}
            for token, who in zip(row, owner, strict=True):
                pieces.setdefault(who, []).append(token)
            for piece in pieces.values():
                if piece[0] == pad:
                    assert set(piece) == {pad}  # the end of a row: padding only
                    continue
                assert piece[0] == cls and piece[-1] == sep
                found.append(piece[1:-1])
        expected = [docs[i][: config.seq_len - 2] for i in batches.documents(step)]
        assert sorted(map(tuple, found)) == sorted(map(tuple, expected))
        update = batches.update(step)
        assert update.documents == config.batch_documents == len(found)
        assert update.tokens == int((rows != pad).sum())
        assert sum(float(b.weights.sum()) for b in update.micro_batches) == pytest.approx(1.0)


def test_one_pass_over_the_corpus_uses_every_document_once(config):
    batches = DocumentBatches(load_corpus(config, progress=False), config)
    n = len(batches.starts)
    per_pass = n // config.batch_documents
    seen = np.concatenate([batches.documents(step) for step in range(per_pass)])
    assert len(set(seen.tolist())) == len(seen) == per_pass * config.batch_documents
    assert not np.array_equal(batches.documents(0), batches.documents(1))
    again = DocumentBatches(load_corpus(config, progress=False), config)
    for got, expected in zip(again.update(2).micro_batches, batches.update(2).micro_batches, strict=True):
        for a, b in zip(got.tensors(), expected.tensors(), strict=True):
            assert torch.equal(a, b)


def test_about_fifteen_percent_of_each_documents_tokens_carry_the_loss(config):
    batches = DocumentBatches(load_corpus(config, progress=False), config)
    masked = real = 0
    for step in range(6):
        rows = batches.layout(step)[0]
        for batch in batches.update(step).micro_batches:
            used = batch.targets != IGNORED
            assert (used.sum(dim=1) > 0).any()
            assert not torch.isin(batch.targets[used], torch.from_numpy(batches.special)).any()
            masked += int(used.sum())
        real += int((~torch.isin(rows, torch.from_numpy(batches.special))).sum())
    assert masked / real == pytest.approx(0.15, abs=0.02)


def test_causal_decoder_targets_stay_inside_documents_and_skip_padding(config):
    config = make_config(config.to_dict(), {"objective": "decoder"})
    batches = DocumentBatches(load_corpus(config, progress=False), config)
    batch = batches.update(0).micro_batches[0]
    used = batch.targets != IGNORED
    assert not (batch.targets[used] == batches.pad).any()
    here = batch.documents.gather(1, batch.positions)
    there = batch.documents.gather(1, batch.positions + 1)
    assert (here[used] == there[used]).all()


def test_micro_batches_weighted_by_loss_positions_give_the_update_mean(config):
    """The same update in micro-batches of 1 row or in one micro-batch: the same loss (the mean over all the
    update's loss positions) and the same weights after the step."""
    corpus = load_corpus(config, progress=False)
    results = []
    for rows in (1, 64):
        cfg = make_config(config.to_dict(), {"batch_size": rows})
        torch.manual_seed(0)
        model = build_model(cfg, corpus.vocab_size).train()
        step = TrainStep(model, make_optimizer(model, cfg, torch.device("cpu")), cfg, torch.device("cpu"))
        update = DocumentBatches(corpus, cfg).update(0)
        loss = step(update.micro_batches, lr=1e-3).loss
        results.append((float(loss), torch.cat([p.detach().flatten() for p in model.parameters()])))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    assert torch.allclose(results[0][1], results[1][1], atol=1e-6)


def test_train_logs_each_updates_size_in_documents_and_tokens(config, tmp_path):
    out = train(config, tmp_path / "run", progress=False)
    log = pd.read_parquet(out / "loss.parquet")
    assert log["update_documents"].tolist() == [16, 16, 16]
    assert (log["update_tokens"] > 16 * 2).all()
    assert log["tokens"].tolist() == log["update_tokens"].cumsum().tolist()


def test_batch_documents_needs_the_document_mask_and_enough_documents(config):
    with pytest.raises(ConfigError, match="document_mask"):
        make_config(config.to_dict(), {"document_mask": False})
    with pytest.raises(ConfigError, match="fewer than one update"):
        cfg = make_config(config.to_dict(), {"batch_documents": 10_000})
        DocumentBatches(load_corpus(cfg, progress=False), cfg)


def test_a_run_records_how_it_differs_from_the_papers_text_and_the_authors_code(config, tmp_path):
    from attngeom.training.recipes import PAPER
    from attngeom.training.runs import RunInfo, paper_differences

    jigsaw = make_config({"recipe": "authors_code", "dataset": "jigsaw", "init": "torch_default_symmetric"})
    differences = paper_differences(jigsaw)
    assert not [d for d in differences if d.split("=")[0] in {*PAPER, "masking", "loss_average", "init"}]
    assert any(d.startswith("precision") for d in differences)  # attngeom has no fp16
    spaced = make_config({"recipe": "paper_text", "dataset": "wikipedia"})
    assert "character_spacing=False (authors' code: True for wikipedia)" in paper_differences(spaced)
    assert any(
        d.startswith("masking=fixed_count (authors' code: bernoulli)") for d in paper_differences(spaced)
    )
    out = train(config, tmp_path / "run", progress=False)
    recorded = yaml.safe_load((out / "config.yaml").read_text())["differs_from_paper"]
    assert "steps=3 (paper: 200000)" in recorded and any(r.startswith("batch_documents=16") for r in recorded)
    assert any(r.startswith("tokens per update ≈") for r in recorded)
    assert any(r.startswith("passes over the data: ") and "every 1,000 updates" in r for r in recorded)
    assert "lr=" not in " ".join(recorded)  # the paper's learning rate is the default
    info = RunInfo.read(out)  # the record is not read back as a setting
    assert info.config == config.for_device("cpu")  # attention: auto recorded as the one that ran
    corpus = json.loads((out / "corpus.json").read_text())
    made = next(d for d in info.labels()["differs_from_paper"].split("; ") if d.startswith("passes"))
    expected = 3 * 16 / corpus["documents"]  # 3 updates of 16 documents
    assert made.startswith(f"passes over the data: {expected:,.1f} in the 3 updates made")


def test_records_count_passes_in_the_updates_made_and_name_a_tokenizer_by_its_content(tmp_path):
    from attngeom.training.runs import DataFacts, RunInfo, paper_differences
    from attngeom.training.tokenizer import BERT_UNCASED_SHA256, bert_uncased_tokenizer, tokenizer_sha256

    assert tokenizer_sha256(bert_uncased_tokenizer()) == BERT_UNCASED_SHA256
    file = make_config({"recipe": "authors_code", "dataset": "jigsaw", "tokenizer": str(tmp_path / "t.json")})
    assert not any(d.startswith("tokenizer=") for d in paper_differences(file, None, BERT_UNCASED_SHA256))
    assert any(d.startswith("tokenizer=") for d in paper_differences(file, None, "0" * 64))
    assert any(d.startswith("tokenizer=") for d in paper_differences(file))  # unknown content: flagged
    facts = DataFacts(documents=25_110, tokens_per_update=24_018.0, passes_per_update=256 / 25_110)
    rate = paper_differences(file, facts)[-1]
    assert rate.startswith("passes over the data: 10.20 every 1,000 updates, over 25,110 documents")
    made = paper_differences(file, DataFacts(25_110, 24_018.0, 256 / 25_110, updates=15_000))[-1]
    assert made.startswith("passes over the data: 152.9 in the 15,000 updates made")
    # model sizes other than the paper's model of that depth are flagged; the preset's own are not
    wide = make_config({"n_layers": 4, "hidden_size": 512, "n_heads": 4, "intermediate_size": 1024})
    assert "hidden_size=512 (paper: 256 at 4 layers)" in paper_differences(wide)
    assert not any(d.startswith(("n_heads", "intermediate")) for d in paper_differences(wide))
    deep = make_config({"n_layers": 6, "hidden_size": 64, "n_heads": 4, "intermediate_size": 128})
    assert "n_layers=6 (paper: 4, 12 or 24 layers)" in paper_differences(deep)
    # a run recorded before corpus.json kept the data's facts: its config.yaml's planned passes, rescaled
    old = tmp_path / "old"
    old.mkdir()
    record = {**file.to_dict(), "differs_from_paper": [
        "passes over the data: 2,039.0 in 200,000 updates of 25,110 documents (paper: …)"
    ]}  # fmt: skip
    (old / "config.yaml").write_text(yaml.safe_dump(record))
    pd.DataFrame({"step": [1, 2, 3], "update_tokens": [100, 200, 300]}).to_parquet(old / "loss.parquet")
    info = RunInfo.read(old)
    assert (info.data.updates, info.data.tokens_per_update, info.data.documents) == (3, 200.0, 25_110)
    assert info.data.passes == pytest.approx(3 * 2039.0 / 200_000)
