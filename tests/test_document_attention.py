"""Attention through the variable-length kernel (``attention: varlen``): the segments it is given, where it
is chosen, and, on a CUDA GPU, that it computes what SDPA with the dense document mask computes (attention
alone, one run's loss and gradients, stacked runs', and compiled training with CUDA graphs)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from test_training_documents import TINY, documents_corpus

from attngeom.training.batch import MicroBatch, bucket
from attngeom.training.config import ConfigError, make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.document_attention import document_attention
from attngeom.training.document_batches import DocumentBatches
from attngeom.training.document_mask import (
    document_attention_mask,
    document_ids,
    document_segments,
    stacked_segments,
)
from attngeom.training.loop import train
from attngeom.training.model import LanguageModelLoss, build_model
from attngeom.training.stacked_model import StackedLoss
from attngeom.training.step import with_segments

SEP = 2
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="the flash kernel needs a CUDA GPU")


def packed_rows(rows: int, length: int, seed: int) -> torch.Tensor:
    """Rows of tokens whose [SEP]s (id 2) end documents of 1 to 60 tokens, the last one cut by the row."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 300, (rows, length), generator=gen)
    ids[torch.rand(rows, length, generator=gen) < 0.05] = SEP
    return ids


def starts(documents: torch.Tensor) -> list[int]:
    """Where each document of the flattened rows starts, counted one by one."""
    out, rows, length = [], *documents.shape
    for b in range(rows):
        for i in range(length):
            if i == 0 or documents[b, i] != documents[b, i - 1]:
                out.append(b * length + i)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_segments_are_every_documents_start_then_the_total_to_a_bucketed_length(seed):
    documents = document_ids(packed_rows(5, 64, seed), SEP)
    found = starts(documents)
    segments = document_segments(documents)
    assert segments.dtype == torch.int32
    assert len(segments) == bucket(len(found)) + 1
    assert segments[: len(found)].tolist() == found
    assert set(segments[len(found) :].tolist()) == {5 * 64}


def test_stacked_segments_are_those_of_the_padded_runs_stacked_on_each_other():
    runs = [
        MicroBatch(*([torch.zeros(b, 1)] * 4), documents=document_ids(packed_rows(b, 32, b), SEP))
        for b in (3, 5)
    ]
    stacked = stacked_segments([document_segments(r.documents) for r in runs], [3, 5], 6, 32)
    padded = torch.cat([r.padded(6, 1).documents for r in runs])  # new rows: one document each
    assert sorted(set(stacked.tolist())) == sorted(set(document_segments(padded).tolist()))
    assert stacked[-1] == 2 * 6 * 32 and (stacked.diff() >= 0).all()


@pytest.mark.parametrize("attention", ["varlen", "blocks"])
@pytest.mark.parametrize("settings", [{}, {"precision": "fp32"}, {"document_mask": False}])
def test_a_document_kernel_where_it_cannot_run_is_refused_with_what_to_set(settings, attention):
    config = make_config(TINY, {"attention": attention, **settings})
    with pytest.raises(ConfigError, match=f"attention={attention} runs on a CUDA GPU.*use attention=dense"):
        config.check_attention("cpu" if not settings else "cuda")


@pytest.mark.parametrize("attention", ["varlen", "blocks"])
def test_the_document_kernels_run_on_a_cuda_gpu_in_bf16_by_default_settings(attention):
    make_config(TINY, {"attention": attention}).check_attention("cuda")  # no error


def test_auto_attention_is_the_block_kernels_on_a_cuda_gpu_where_triton_is_installed():
    config = make_config(TINY, {})
    assert config.attention == "auto"
    triton = importlib.util.find_spec("triton") is not None
    assert config.for_device("cuda").attention == ("blocks" if triton else "dense")
    assert config.for_device("cuda").for_device("cpu") == config.for_device("cuda")  # concrete once made


@pytest.mark.parametrize(
    ("device", "settings"), [("cpu", {}), ("cuda", {"precision": "fp32"}), ("cuda", {"document_mask": False})]
)
def test_auto_attention_is_dense_where_the_block_kernels_cannot_run(device, settings):
    config = make_config(TINY, settings).for_device(device)
    assert config.attention == "dense"
    config.check_attention(device)  # no error


@pytest.mark.parametrize("attention", ["dense", "varlen", "blocks"])
def test_a_chosen_attention_is_kept_on_every_device(attention):
    assert make_config(TINY, {"attention": attention}).for_device("cpu").attention == attention


@pytest.mark.skipif(importlib.util.find_spec("triton") is not None, reason="where Triton is missing")
def test_a_blocks_model_without_triton_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="attention=blocks needs Triton.*use attention=dense"):
        build_model(make_config(TINY, {"attention": "blocks"}), TINY["vocab_size"])


def test_a_varlen_model_called_without_segments_says_how_to_call_it():
    model = build_model(make_config(TINY, {"attention": "varlen"}), TINY["vocab_size"])
    with pytest.raises(ValueError, match="takes the rows' document segments"):
        model.bert(input_ids=packed_rows(2, 16, 0))


# ---- on a CUDA GPU: the kernel against SDPA with the dense mask -------------------------------------------

BF16 = dict(rtol=2e-2, atol=2e-2)


def qkv(rows: int, length: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(rows, 4, length, 32, generator=gen).cuda().bfloat16().requires_grad_() for _ in range(3)
    ]


@CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_the_kernel_computes_the_dense_masks_attention_and_gradients(causal):
    documents = document_ids(packed_rows(6, 128, 1), SEP).cuda()
    q, k, v = qkv(6, 128, 2)
    ours = document_attention(q, k, v, document_segments(documents.cpu()).cuda(), 0.0, causal)
    dense = F.scaled_dot_product_attention(q, k, v, attn_mask=document_attention_mask(documents, causal))
    torch.testing.assert_close(ours, dense.transpose(1, 2), **BF16)
    grad = torch.randn_like(ours)
    ours_grads = torch.autograd.grad(ours, (q, k, v), grad)
    dense_grads = torch.autograd.grad(dense.transpose(1, 2), (q, k, v), grad)
    for a, b in zip(ours_grads, dense_grads, strict=True):
        torch.testing.assert_close(a, b, **BF16)


@CUDA
@pytest.mark.gpu
def test_attention_dropout_drops_about_p_of_the_pairs_and_keeps_the_mean():
    documents = document_ids(packed_rows(4, 128, 3), SEP).cuda()
    segments = document_segments(documents.cpu()).cuda()
    q, k, v = (t.detach() for t in qkv(4, 128, 4))
    dense = document_attention(q, k, v, segments, 0.0, False).float()
    draws = torch.stack([document_attention(q, k, v, segments, 0.1, False).float() for _ in range(400)])
    assert not torch.equal(draws[0], draws[1])
    error = (draws.mean(0) - dense).abs().mean() / dense.abs().mean()
    assert error < 0.02  # one draw alone is ~10× further off


def documents_config(tmp_path, **settings):
    path = documents_corpus(tmp_path / "corpus.txt", seed=3)
    base = dict(TINY, dataset=path, cache_dir=str(tmp_path / "cache"), batch_size=4, device="cuda")
    return make_config(base, {"batch_documents": 16, "dropout": 0.0, "warmup_steps": 1, **settings})


@CUDA
@pytest.mark.gpu
@pytest.mark.parametrize(
    "stacked, kernel",
    [(False, "varlen"), (True, "varlen"), (False, "blocks")],
    ids=["one run", "stacked runs", "blocks"],
)
def test_the_loss_and_gradients_are_those_of_the_dense_mask(tmp_path, stacked, kernel):
    config = documents_config(tmp_path)
    corpus = load_corpus(config, progress=False)
    batch = DocumentBatches(corpus, config).update(0).micro_batches[0]
    results = []
    for attention in ("dense", kernel):
        torch.manual_seed(0)
        chosen = replace(config, attention=attention)
        models = [build_model(chosen, corpus.vocab_size).cuda() for _ in range(2 if stacked else 1)]
        objective = StackedLoss(models) if stacked else LanguageModelLoss(models[0])
        micro = with_segments(batch) if attention == "varlen" else batch
        tensors = [t.cuda() for t in micro.tensors()]
        if stacked:
            tensors = [torch.stack([t, t]) for t in tensors[:5]] + tensors[5:]
            if attention == "varlen":
                rows = len(batch.input_ids)
                tensors[5] = stacked_segments([tensors[5]] * 2, [rows, rows], rows, config.seq_len)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _ = objective(*tensors)
        loss.sum().backward()
        results.append((loss.detach(), [p.grad.clone() for p in objective.parameters()]))
    (dense_loss, dense_grads), (loss, grads) = results
    torch.testing.assert_close(loss, dense_loss, **BF16)
    scale = torch.cat([g.flatten() for g in dense_grads]).norm()
    for a, b in zip(grads, dense_grads, strict=True):  # bf16: relative to the gradient, or to all of them
        assert (a - b).norm() <= 0.05 * b.norm() + 1e-4 * scale


@CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["varlen", "blocks"])
def test_compiled_training_with_cuda_graphs_follows_the_dense_masks_losses(tmp_path, kernel):
    logs = []
    for attention in ("dense", kernel):
        config = documents_config(tmp_path, attention=attention, steps=12, compile=True)
        out = train(config, tmp_path / attention, progress=False)
        logs.append(pd.read_parquet(out / "loss.parquet")["lm_loss"].to_numpy())
    dense, ours = logs
    assert len(ours) == 12
    assert abs(ours - dense).max() < 0.02 * dense.max()


def test_the_kernel_benchmark_packs_the_paper_updates_documents_and_refuses_a_machine_without_cuda():
    import document_attention  # benchmarks/, on the import path through tests/bench_support.py

    sizes = document_attention.document_sizes(seed=1)
    for documents, starts in (
        document_attention.packed_documents(seed=1),
        document_attention.slotted_documents(seed=1)[:2],
    ):
        assert documents.shape[1] == 512 and len(documents) < 256
        flat = documents.flatten()
        for index, (start, size) in enumerate(zip(starts.tolist(), sizes, strict=True)):
            assert (flat[start : start + size] == index).all() and int((flat == index).sum()) == size
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="needs a CUDA GPU"):
            document_attention.main([])


def test_the_benchmarks_slot_layout_attends_as_the_dense_document_mask_token_by_token():
    """Documents in slots of their size class (one SDPA call a class, rows viewed as slots) give every
    token the output, and the gradients for one gradient of each token's output, that the dense document
    mask over first-fit rows gives it."""
    import document_attention as bench

    sizes, heads, dim = bench.document_sizes(seed=2), 2, 8
    gen = torch.Generator().manual_seed(2)
    q, k, v, grad = (
        torch.randn(sum(sizes), heads, dim, generator=gen, dtype=torch.float64) for _ in range(4)
    )

    def per_token(documents, starts, attention):
        places = torch.cat([s + torch.arange(n) for s, n in zip(starts.tolist(), sizes, strict=True)])

        def rows(values):
            out = torch.zeros(len(documents) * 512, heads, dim, dtype=values.dtype)
            out[places] = values
            return out.view(len(documents), 512, heads, dim)

        qkv = [rows(t).transpose(1, 2).requires_grad_() for t in (q, k, v)]  # BERT's layout
        out = attention(*qkv)
        grads = torch.autograd.grad(out, qkv, rows(grad))
        return [t.reshape(-1, heads, dim)[places] for t in (out, *(g.transpose(1, 2) for g in grads))]

    documents, starts = bench.packed_documents(seed=2)
    mask = document_attention_mask(documents, causal=False)
    dense = per_token(
        documents, starts, lambda *qkv: F.scaled_dot_product_attention(*qkv, attn_mask=mask).transpose(1, 2)
    )
    documents, starts, counts = bench.slotted_documents(seed=2)
    assert sum(counts) == len(documents) and all(counts)
    masks = list(bench.slot_masks(documents, counts))
    slots = per_token(documents, starts, lambda *qkv: bench.slot_attention(*qkv, masks, counts, 0.0))
    for got, want in zip(slots, dense, strict=True):  # output, dq, dk, dv
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def rows_of(*rows: list[int], length: int = 128) -> torch.Tensor:
    """(R, length) document ids: each row's documents of the lengths given, in order, then padding (-1)."""
    out = torch.full((len(rows), length), -1)
    for r, sizes in enumerate(rows):
        out[r, : sum(sizes)] = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    return out


@pytest.mark.parametrize("query_block, key_block", [(64, 32), (32, 64), (16, 16)])
def test_the_block_kernels_pair_count_is_every_pair_of_a_row_of_one_document_and_only_the_kept_ones_on_block_bounds(
    query_block, key_block
):
    import document_attention as bench

    assert bench.block_pairs(rows_of([128]), query_block, key_block).tolist() == [128 * 128]
    aligned = rows_of([64, 64], [64, 0, 64], [128])  # documents on every block's bounds
    kept = (aligned[:, :, None] == aligned[:, None, :]).sum((1, 2))
    assert bench.block_pairs(aligned, query_block, key_block).tolist() == kept.tolist()
    gen = torch.Generator().manual_seed(0)
    straddling = rows_of(*(torch.randint(1, 40, (4,), generator=gen).tolist() for _ in range(6)))
    kept = (straddling[:, :, None] == straddling[:, None, :]).sum((1, 2))
    assert (bench.block_pairs(straddling, query_block, key_block) > kept).all()


def test_the_best_row_order_puts_documents_on_block_bounds_where_their_lengths_allow():
    """[32, 64, 32] in 64-token blocks: each query block reaches the whole row (2 × 64 × 128 pairs); in the
    order [64, 32, 32] each query block reaches only its own 64 keys (2 × 64 × 64)."""
    import document_attention as bench

    given = rows_of([32, 64, 32])
    assert bench.block_pairs(given, 64, 64).tolist() == [2 * 64 * 128]
    assert bench.best_row_orders(given, 64, 64) == 2 * 64 * 64
    padded = rows_of([32, 64])  # padding stays last: [64, 32] + 32 of padding is the best order
    assert bench.best_row_orders(padded, 64, 64) == bench.block_pairs(rows_of([64, 32]), 64, 64).item()


def test_a_stacked_runs_empty_pass_is_one_document_a_row():
    from attngeom.training.stacked import _share

    documents = document_ids(packed_rows(3, 32, 0), SEP)
    batch = with_segments(MicroBatch(*([torch.ones(3, 32, dtype=torch.long)] * 4), documents=documents))
    empty = _share([batch], micro=1)  # a run whose update needed fewer passes than the others'
    assert empty.segments.tolist() == [0, 32, 64, 96]
    assert (empty.targets == -100).all()
