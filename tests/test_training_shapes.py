"""Micro-batches whose rows and loss slots change from update to update compile once (``let_shapes_vary``),
for one run's loss and for stacked runs'; left to torch.compile alone they recompile."""

from __future__ import annotations

import pytest
import torch
from test_training_documents import TINY  # the tiny model of the documents tests
from torch._dynamo.testing import CompileCounter

from attngeom.training.config import make_config
from attngeom.training.model import LanguageModelLoss, build_model
from attngeom.training.stacked_model import StackedLoss
from attngeom.training.step import compile_loss, let_shapes_vary

VOCAB = 301
SHAPES = ((4, 3), (6, 5), (8, 7))
"""(rows, loss slots) of three micro-batches, as ``batch.bucket`` varies them."""


def micro_batch(rows: int, slots: int, runs: int | None = None) -> list[torch.Tensor]:
    """input_ids, positions, targets, weights (``MicroBatch.tensors()`` order); ``runs`` stacked first."""
    lead = (runs,) if runs else ()
    gen = torch.Generator().manual_seed(rows)
    return [
        torch.randint(1, VOCAB, (*lead, rows, 20), generator=gen),
        torch.randint(0, 20, (*lead, rows, slots), generator=gen),
        torch.randint(0, VOCAB, (*lead, rows, slots), generator=gen),
        torch.full((*lead, rows, slots), 1 / (rows * slots)),
    ]


def compilations(objective: torch.nn.Module, stacked: bool, vary: bool) -> int:
    torch._dynamo.reset()
    counter = CompileCounter()
    compiled = torch.compile(objective, backend=counter)
    for rows, slots in SHAPES:
        tensors = micro_batch(rows, slots, runs=2 if stacked else None)
        if vary:
            let_shapes_vary(tensors, rows_dim=1 if stacked else 0)
        loss, _ = compiled(*tensors)
        loss.sum().backward()
    return counter.frame_count


@pytest.mark.parametrize("stacked", [False, True], ids=["one run", "stacked runs"])
def test_varying_rows_and_slots_compile_one_graph(stacked):
    configs = [make_config(TINY, {"seed": s, "dropout": 0.0}) for s in (0, 1)]
    models = [build_model(c, VOCAB) for c in configs]
    objective = StackedLoss(models) if stacked else LanguageModelLoss(models[0])
    assert compilations(objective, stacked, vary=True) == 1
    assert compilations(objective, stacked, vary=False) > 1  # torch.compile alone recompiles


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="inductor's Triton kernels need a CUDA GPU")
@pytest.mark.parametrize("strict", [False, True], ids=["as compile_loss compiles", "torch's default"])
def test_masked_positions_past_inductors_size_threshold_do_not_recompile(strict):
    """Rows × slots × hidden crossing 5·2²⁰ (the strict mix-order reduction's size question) recompiled."""
    config = make_config(TINY, {"hidden_size": 256, "n_heads": 4, "intermediate_size": 512, "dropout": 0.0})
    objective = LanguageModelLoss(build_model(config, VOCAB)).cuda()
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(objective) if strict else compile_loss(objective, "default")
    for rows, slots in ((8, 16), (176, 128)):  # 128 and 22,528 masked positions, 256 wide
        tensors = [t.cuda() for t in micro_batch(rows, slots)]
        let_shapes_vary(tensors)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _ = compiled(*tensors)
        loss.backward()
    assert (torch._dynamo.utils.counters["stats"]["unique_graphs"] > 1) == strict
