"""Runs trained stacked (one process, one step, weights stacked over runs) match the same runs trained alone
(CPU, tiny model, dropout off, a few steps; float32, so to a stated tolerance, not bit for bit)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from test_training_documents import TINY, documents_corpus  # the tiny model and corpus of the documents tests

from attngeom.training.cli import run_folders
from attngeom.training.config import ConfigError, make_config
from attngeom.training.loop import train
from attngeom.training.model import LanguageModelLoss, build_model
from attngeom.training.stacked import check_stackable, clip_per_run, train_stacked
from attngeom.training.stacked_model import StackedLoss

LOSS_RTOL = 1e-5
"""float32: the stacked path sums in another order (batched products, a per-run mean of the loss)."""
WEIGHT_ATOL = 1e-5


@pytest.fixture
def corpus(tmp_path):
    path = documents_corpus(tmp_path / "corpus.txt", seed=5)
    return dict(TINY, dataset=path, cache_dir=str(tmp_path / "cache"), device="cpu")


def settings(corpus, **extra):
    base = dict(steps=3, warmup_steps=1, lr=1e-3, dropout=0.0, log_every=2, score_every=2, checkpoint_every=2)
    return make_config(corpus, base, extra)


def final_weights(folder):
    return load_file(str(folder / "final" / "model.safetensors"))


@pytest.mark.parametrize(
    "extra",
    [
        # documents: the two runs need 2 or 3 micro-batches an update (not always the same number), so one
        # steps beside an empty one; the regulariser; a clip small enough to act on every step
        dict(batch_documents=16, batch_size=3, reg_weight=0.5, grad_clip=0.05),
        dict(batch_size=3, grad_accum=2, objective="decoder"),  # the packed stream, causal decoder
    ],
)
def test_stacked_runs_match_the_same_runs_trained_alone(corpus, tmp_path, extra):
    runs = [
        settings(corpus, seed=0, init="random", **extra),
        settings(corpus, seed=1, init="symmetric", **extra),
    ]
    alone = [train(c, tmp_path / f"alone-{i}", progress=False) for i, c in enumerate(runs)]
    stacked = train_stacked(runs, [tmp_path / "stacked-0", tmp_path / "stacked-1"], progress=False)
    for solo, together in zip(alone, stacked, strict=True):
        a, b = pd.read_parquet(solo / "loss.parquet"), pd.read_parquet(together / "loss.parquet")
        assert list(a.columns) == list(b.columns) and list(a["step"]) == list(b["step"]) == [1, 2, 3]
        for column in ("loss", "lm_loss", "grad_norm"):
            assert b[column].to_numpy() == pytest.approx(a[column].to_numpy(), rel=LOSS_RTOL), column
        assert list(a["update_tokens"]) == list(b["update_tokens"])
        sa, sb = pd.read_parquet(solo / "scores.parquet"), pd.read_parquet(together / "scores.parquet")
        assert list(sa.columns) == list(sb.columns) and len(sa) == len(sb)
        wa, wb = final_weights(solo), final_weights(together)
        assert wa.keys() == wb.keys()
        for name in wa:
            torch.testing.assert_close(wb[name], wa[name], rtol=0, atol=WEIGHT_ATOL, msg=name)
    # the two runs really differ (seed and init), so matching each one alone is no accident
    first, second = final_weights(stacked[0]), final_weights(stacked[1])
    assert max((first[n] - second[n]).abs().max().item() for n in first) > 100 * WEIGHT_ATOL


def test_a_stacked_checkpoint_resumes_alone_and_stacked_like_an_uninterrupted_run(corpus, tmp_path):
    runs = [settings(corpus, seed=s, batch_documents=16, batch_size=4) for s in (0, 1)]
    whole = train(runs[1], tmp_path / "whole", progress=False)
    outs = [tmp_path / "a", tmp_path / "b"]
    train_stacked(runs, outs, progress=False, stop_at=2)
    assert not (outs[1] / "final").exists() and (outs[1] / "checkpoint" / "state.pt").is_file()
    train(runs[1], outs[1], progress=False)  # run b alone from the stacked checkpoint
    train_stacked(runs[:1], outs[:1], progress=False)  # run a, stacked (of one), from its checkpoint
    for folder in (outs[1],):
        a, b = pd.read_parquet(whole / "loss.parquet"), pd.read_parquet(folder / "loss.parquet")
        assert b["loss"].to_numpy() == pytest.approx(a["loss"].to_numpy(), rel=LOSS_RTOL)
    assert pd.read_parquet(outs[0] / "loss.parquet")["step"].tolist() == [1, 2, 3]
    for name, weight in final_weights(whole).items():
        torch.testing.assert_close(final_weights(outs[1])[name], weight, rtol=0, atol=WEIGHT_ATOL, msg=name)


def test_stacked_loss_and_gradients_equal_each_models_own_in_float64():
    configs = [
        make_config(TINY, {"seed": s, "init": i, "dropout": 0.0}) for s, i in ((0, "random"), (3, "skew"))
    ]
    models = []
    for c in configs:
        torch.manual_seed(c.seed)
        models.append(build_model(c, 301).double())
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 301, (2, 3, 20), generator=gen)
    positions, targets = (
        torch.randint(0, 20, (2, 3, 4), generator=gen),
        torch.randint(0, 301, (2, 3, 4), generator=gen),
    )
    weights = torch.rand(2, 3, 4, generator=gen, dtype=torch.float64)
    alone = []
    for r, model in enumerate(models):
        loss, _ = LanguageModelLoss(model)(ids[r], positions[r], targets[r], weights[r])
        loss.backward()
        alone.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    stacked = StackedLoss(models)
    loss, _ = stacked(ids, positions, targets, weights)
    loss.sum().backward()
    for r, (expected, grads) in enumerate(alone):
        torch.testing.assert_close(loss[r].detach(), expected, rtol=1e-6, atol=0)  # float32 cross-entropy
        for name in stacked.names:
            torch.testing.assert_close(stacked.w(name).grad[r], grads[name], rtol=1e-9, atol=1e-12, msg=name)


def test_clipping_is_per_run():
    grads = [torch.tensor([[3.0, 0.0], [0.3, 0.0]]), torch.tensor([[4.0], [0.4]])]
    params = [torch.zeros_like(g).requires_grad_() for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    norms = clip_per_run(params, 1.0)
    assert norms.tolist() == pytest.approx([5.0, 0.5])
    assert params[0].grad[0].tolist() == pytest.approx([0.6, 0.0], rel=1e-5)  # run 0 scaled to norm 1
    assert params[0].grad[1].tolist() == pytest.approx([0.3, 0.0])  # run 1 under the limit, untouched


def test_runs_that_differ_in_more_than_seed_and_init_are_refused(corpus, tmp_path):
    a, b = (
        settings(corpus),
        settings(corpus, n_layers=4, hidden_size=None, n_heads=None, intermediate_size=None),
    )
    with pytest.raises(ConfigError, match="cannot train stacked: they differ in n_layers"):
        check_stackable([a, b], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="differ in log_every"):
        check_stackable([a, settings(corpus, log_every=1)], [tmp_path / "a", tmp_path / "b"])
    with pytest.raises(ConfigError, match="same --out folder"):
        check_stackable([a, settings(corpus, seed=1)], [tmp_path / "a", tmp_path / "a"])
    with pytest.raises(ConfigError, match="update_graph is not available for stacked runs"):
        check_stackable([settings(corpus, update_graph=True)] * 2, [tmp_path / "a", tmp_path / "b"])
    assert a.update_graph is None  # the default: on for a run alone, off (not refused) for stacked runs
    check_stackable([a, settings(corpus, seed=1)], [tmp_path / "a", tmp_path / "b"])


def test_the_out_template_names_a_folder_per_run():
    assert run_folders("runs/{init}-{seed}", ["0", "1"], ["random", "skew"]) == [
        ("runs/random-0", "0", "random"),
        ("runs/random-1", "1", "random"),
        ("runs/skew-0", "0", "skew"),
        ("runs/skew-1", "1", "skew"),
    ]
    with pytest.raises(ConfigError, match=r"\{seed\}"):
        run_folders("runs/enc", ["0", "1"], ["random"])
