"""Training: initialisations, regulariser, masks, resume, data loaders (tiny models on the CPU)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from training_fixtures import TINY, sentences, tiny, write_corpus

import attngeom
from attngeom.cli import main
from attngeom.training.batch import IGNORED
from attngeom.training.bookkeeping import Schedule
from attngeom.training.config import ConfigError, TrainConfig, make_config, parse_overrides
from attngeom.training.corpus import load_corpus
from attngeom.training.documents import DocumentSource
from attngeom.training.loop import train
from attngeom.training.model import LanguageModelLoss, build_model, head_symmetry, symmetry_penalty
from attngeom.training.stream_batches import PackedBatches


@pytest.fixture
def text_file(tmp_path):
    return write_corpus(tmp_path)


def layer_and_head_symmetry(model) -> pd.Series:
    return attngeom.score(model, progress=False)["symmetry"]


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
@pytest.mark.parametrize(("init", "expected"), [("symmetric", 1.0), ("skew", -1.0)])
def test_init_gives_exact_symmetry_for_every_head(objective, init, expected):
    torch.manual_seed(0)
    model = build_model(TrainConfig(objective=objective, init=init, **TINY), vocab_size=300)
    scores = layer_and_head_symmetry(model)
    assert len(scores) == 2 * (4 + 1)
    assert scores.to_numpy() == pytest.approx(expected, abs=1e-6)


def test_random_init_is_not_symmetric():
    torch.manual_seed(0)
    model = build_model(TrainConfig(init="random", **TINY), vocab_size=300)
    assert layer_and_head_symmetry(model).abs().max() < 0.5


def test_head_symmetry_matches_the_scoring_engine():
    torch.manual_seed(0)
    model = build_model(TrainConfig(**TINY), vocab_size=300)
    frame = attngeom.score(model, progress=False)
    heads = frame[frame["head"].notna()].sort_values(["layer", "head"])["symmetry"].to_numpy()
    assert head_symmetry(model).detach().flatten().numpy() == pytest.approx(heads, abs=1e-5)


@pytest.mark.parametrize(("target", "sign"), [("symmetric", 1), ("skew", -1)])
def test_regulariser_gradient_moves_symmetry_towards_its_target(target, sign):
    torch.manual_seed(0)
    model = build_model(TrainConfig(**TINY), vocab_size=300)
    before = layer_and_head_symmetry(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(5):
        optimizer.zero_grad()
        symmetry_penalty(model, target).backward()
        optimizer.step()
    after = layer_and_head_symmetry(model)
    assert (sign * (after - before) > 0).all()


def per_position_loss(model, ids: torch.Tensor, positions: list[int]) -> torch.Tensor:
    wrapped = LanguageModelLoss(model)
    return torch.stack(
        [wrapped(ids, torch.tensor([[p]]), ids[:, p + 1 : p + 2], torch.ones(1, 1))[1] for p in positions]
    )


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_only_the_decoder_is_blind_to_future_tokens(objective):
    torch.manual_seed(0)
    model = build_model(TrainConfig(objective=objective, **TINY), vocab_size=300).eval()
    ids = torch.randint(5, 300, (1, 24))
    changed = ids.clone()
    changed[0, 12:] = torch.randint(5, 300, (12,))
    earlier = list(range(10))  # positions 0..9 predict tokens 1..10, all before the change
    with torch.no_grad():
        a, b = per_position_loss(model, ids, earlier), per_position_loss(model, changed, earlier)
    if objective == "decoder":
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    else:
        assert (a - b).abs().max() > 1e-4


@pytest.mark.parametrize("stop_at", [7, 6])  # between score steps, and on one
def test_resume_after_interruption_reproduces_the_loss_log(tmp_path, text_file, stop_at):
    config = tiny(
        tmp_path, text_file, steps=12, log_every=3, checkpoint_every=4, score_every=6, warmup_steps=2
    )
    whole = train(config, tmp_path / "whole", progress=False)
    train(config, tmp_path / "cut", progress=False, stop_at=stop_at)  # a checkpoint and logs at stop_at
    assert not (tmp_path / "cut" / "final").exists()
    cut = train(config, tmp_path / "cut", progress=False)
    columns = ["step", "loss", "lm_loss", "grad_norm", "lr", "tokens"]
    expected, got = (pd.read_parquet(p / "loss.parquet")[columns] for p in (whole, cut))
    assert list(got["step"]) == list(range(1, 13))
    pd.testing.assert_frame_equal(got, expected)
    score_columns = ["step", "layer", "head", "symmetry", "directionality"]
    pd.testing.assert_frame_equal(
        *(pd.read_parquet(p / "scores.parquet")[score_columns] for p in (whole, cut))
    )
    assert sorted(pd.read_parquet(cut / "scores.parquet")["step"].unique()) == [0, 6, 12]


def test_schedule_logs_before_every_checkpoint_and_scores_at_both_ends():
    when = Schedule(log_every=10, score_every=4, checkpoint_every=6, steps=13, end=9)
    assert [s for s in range(1, 14) if when.checkpoint(s)] == [6, 9, 12]  # 9: where this call stops
    assert [s for s in range(1, 14) if when.log(s)] == [6, 9, 10, 12]
    assert [s for s in range(14) if when.score(s)] == [0, 4, 8, 12, 13]


def test_loss_log_is_written_at_checkpoints_with_every_row(tmp_path):
    from attngeom.training.bookkeeping import LossLog, StepRecord

    path = tmp_path / "loss.parquet"
    log = LossLog(path, keep_through=0)

    def record(step: int, loss: float = 1.0) -> None:
        value = torch.tensor(loss)
        log.record(StepRecord(step, value, value, torch.tensor(0.5), 1e-4, float(step), 10, 2))

    for step in (1, 2):
        record(step)
    log.flush(lambda: 2.0, write=False)
    assert not path.exists()  # rows in memory between checkpoints
    record(3)
    log.flush(lambda: 3.0, write=True)
    assert list(pd.read_parquet(path)["step"]) == [1, 2, 3]
    assert list(pd.read_parquet(path)["tokens"]) == [10, 20, 30]
    record(4, loss=float("nan"))  # a diverged loss is written at once, then raised
    with pytest.raises(Exception, match="diverged"):
        log.flush(lambda: 4.0, write=False)
    assert list(pd.read_parquet(path)["step"]) == [1, 2, 3, 4]
    assert LossLog(path, keep_through=2).tokens == 20  # a resumed run keeps the rows to its checkpoint


def test_checkpoint_loads_with_weights_only(tmp_path, text_file):
    run = train(tiny(tmp_path, text_file, steps=2, checkpoint_every=1), tmp_path / "run", progress=False)
    state = torch.load(run / "checkpoint" / "state.pt", weights_only=True)
    assert state["step"] == 2


@pytest.mark.parametrize("objective", ["encoder", "decoder"])
def test_cli_trains_a_model_that_attngeom_scores(tmp_path, text_file, objective, capsys):
    run = tmp_path / "run"
    cache = tmp_path / "cache"
    settings = [f"{k}={v}" for k, v in TINY.items()]
    code = main(
        [
            "train",
            "--out",
            str(run),
            "--quiet",
            *settings,
            f"dataset={text_file}",
            f"cache_dir={cache}",
            "steps=3",
            "batch_size=2",
            "grad_accum=1",
            f"objective={objective}",
            "init=symmetric",
        ]
    )
    assert code == 0
    assert main(["score", str(run / "final"), "-o", str(tmp_path / "s.parquet"), "--quiet"]) == 0
    scores = pd.read_parquet(run / "scores.parquet")
    assert scores.loc[scores["step"] == 0, "symmetry"].to_numpy() == pytest.approx(1.0, abs=1e-6)
    assert {"init", "training_objective"}.isdisjoint(scores.columns)  # what a run trains: config.yaml


def test_cli_reports_bad_settings_in_one_line(tmp_path, capsys):
    assert main(["train", "--out", str(tmp_path / "run"), "steps=ten"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    assert not (tmp_path / "run").exists()


def test_config_rejects_unknown_and_invalid_settings():
    with pytest.raises(ConfigError, match="unknown training setting"):
        make_config({"stepz": 3})
    with pytest.raises(ConfigError, match="objective"):
        make_config({"objective": "seq2seq"})
    with pytest.raises(ConfigError, match="no preset"):
        make_config({"n_layers": 3})
    assert make_config(parse_overrides(["steps=1e3", "compile=true", "max_documents=none"])).steps == 1000


# ------------------------------------------------------------------ data


def test_local_loaders_read_txt_jsonl_parquet_and_folders(tmp_path):
    docs = sentences(20)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.txt").write_text("\n".join(docs[:5]) + "\n\n")
    (folder / "b.jsonl").write_text("".join(json.dumps({"body": d}) + "\n" for d in docs[5:12]))
    pd.DataFrame({"body": docs[12:]}).to_parquet(folder / "c.parquet")
    config = TrainConfig(dataset=str(folder), text_column="body", **TINY)
    assert list(DocumentSource.of(config).documents()) == docs
    capped = TrainConfig(dataset=str(folder / "b.jsonl"), text_column="body", max_documents=3, **TINY)
    assert list(DocumentSource.of(capped).documents()) == docs[5:8]


def test_local_loaders_name_bad_input(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(ConfigError, match="bad.jsonl:2"):
        list(DocumentSource.of(TrainConfig(dataset=str(bad), **TINY)).documents())
    with pytest.raises(ConfigError, match="neither"):
        list(DocumentSource.of(TrainConfig(dataset=str(tmp_path / "missing.txt"), **TINY)).documents())


def test_a_data_source_is_resolved_once_and_the_corpus_keeps_it(tmp_path, text_file):
    """``DocumentSource.of`` resolves the dataset setting once (a local corpus with its files as they are
    then: a bad name is an error before anything is read); the token cache is keyed by that source and the
    corpus carries it to the run folder, which records what was read."""
    config = tiny(tmp_path, text_file)
    source = DocumentSource.of(config)
    assert (source.kind, source.location, source.substitute) == ("local", str(text_file), "")
    assert [name for name, _, _ in source.files] == [str(text_file.resolve())]
    corpus = load_corpus(config, progress=False, source=source)
    assert corpus.source is source and corpus.path == load_corpus(config, progress=False).path
    text_file.write_text(text_file.read_text() + "one more document\n")
    edited = DocumentSource.of(config)
    assert edited != source and load_corpus(config, progress=False, source=edited).path != corpus.path
    wikipedia = DocumentSource.of(make_config({"dataset": "wikipedia@" + "a" * 40, "text_column": "body"}))
    assert (wikipedia.kind, wikipedia.location, wikipedia.revision) == (
        "hub",
        "wikimedia/wikipedia",
        "a" * 40,
    )
    assert wikipedia.column == "body" and wikipedia.substitute.startswith("Wikipedia 20231101.en")


def test_corpus_is_cached_and_batches_are_packed_and_reproducible(tmp_path, text_file):
    config = tiny(tmp_path, text_file)
    corpus = load_corpus(config, progress=False)
    assert load_corpus(config, progress=False).path == corpus.path
    sep = corpus.token_id("[SEP]")
    assert int(corpus.tokens[-1]) == sep and int((corpus.tokens == sep).sum()) == 400
    batches = PackedBatches(corpus, config)
    first, again = batches[3], PackedBatches(corpus, config)[3]
    assert torch.equal(first.input_ids, again.input_ids) and torch.equal(first.positions, again.positions)
    assert not torch.equal(batches[3].input_ids, batches[4].input_ids)
    rows = batches.rows(3)
    assert not (rows == corpus.token_id("[PAD]")).any()  # packed: no padding anywhere
    assert first.positions.shape == (4, batches.n_masked)
    assert torch.equal(rows.gather(1, first.positions), first.targets)  # targets are the original tokens
    special = batches.special
    assert not torch.isin(first.targets, special).any()  # special tokens are never masked


def test_decoder_batches_shift_targets(tmp_path, text_file):
    causal = PackedBatches(
        load_corpus(tiny(tmp_path, text_file), progress=False), tiny(tmp_path, text_file, objective="decoder")
    )
    batch = causal[0]
    sep = causal.sep
    kept = batch.targets != IGNORED  # documents are masked: a [SEP] cannot predict the next document
    assert torch.equal(batch.input_ids[:, 1:][kept], batch.targets[kept])
    assert torch.equal(~kept, batch.input_ids[:, :-1] == sep) and kept.any()
    masked_config = tiny(tmp_path, text_file, objective="decoder", decoder_loss="masked")
    masked = PackedBatches(load_corpus(masked_config, progress=False), masked_config)[0]
    rows = PackedBatches(load_corpus(masked_config, progress=False), masked_config).rows(0)
    kept = masked.targets != IGNORED
    predicted = rows.gather(1, masked.positions + 1)
    assert torch.equal(predicted[kept], masked.targets[kept])  # position i−1 predicts masked i
    assert torch.equal(~kept, rows.gather(1, masked.positions) == sep)
    unmasked = tiny(tmp_path, text_file, objective="decoder", document_mask=False)
    plain = PackedBatches(load_corpus(unmasked, progress=False), unmasked)[0]
    assert torch.equal(plain.input_ids[:, 1:], plain.targets)  # documents see each other: every target counts


def test_hub_style_loader_streams_a_local_parquet_dataset(tmp_path):
    """The ``hf:`` path (datasets, streaming, no loading script) on a local folder of Parquet files."""
    docs = sentences(7)
    pd.DataFrame({"comment_text": docs}).to_parquet(tmp_path / "train.parquet")
    config = TrainConfig(dataset=f"hf:{tmp_path}", text_column="comment_text", max_documents=5, **TINY)
    assert list(DocumentSource.of(config).documents()) == docs[:5]
