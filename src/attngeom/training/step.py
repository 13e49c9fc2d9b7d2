"""One optimizer step, and the micro-batches that feed it, kept off the GPU's critical path.

The step: forward and backward over ``grad_accum`` micro-batches (DDP syncs gradients on the last one only),
clip, fused AdamW (where the loss runs as CUDA graphs, by default those two as one CUDA graph of their own:
``CapturedUpdate``, ``update_graph``). Compiled (``TrainConfig.compiles_on``), the loss (model, gather at
the loss positions, cross-entropy) is one torch.compile graph; on a single CUDA GPU its forward and backward
also run as CUDA graphs (``reduce-overhead``), also with several micro-batches a step, so a small model is
not bound by Python launching its kernels. An update is its micro-batches: ``grad_accum`` of the packed
stream, or as many passes as its documents need (``DocumentBatches``); every loss position carries its share
of the update's loss, so the update's loss is the sum of its micro-batches'.

The feed: micro-batch ``i`` is still a pure function of (seed, i), but it is built on a background thread a
few batches ahead, in pinned memory, and copied to the GPU without blocking, so the GPU never waits for it.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from .batch import MicroBatch, Update
from .config import TrainConfig
from .document_batches import DocumentBatches
from .document_mask import document_segments
from .model import LanguageModelLoss
from .stream_batches import PackedBatches

FEED_AHEAD = 4
"""Micro-batches built ahead of the one the step is using."""


@dataclass(frozen=True)
class StepLosses:
    """One optimizer step's mean loss, LM loss (over micro-batches and ranks) and gradient norm, on device."""

    loss: torch.Tensor
    lm_loss: torch.Tensor
    grad_norm: torch.Tensor


def compile_mode(device: torch.device, world: int) -> str:
    """CUDA graphs where they are safe: one process on a CUDA GPU (DDP's hooks stay outside graphs).

    With several micro-batches a step, the second backward pass would add into gradients that the first
    one left in the graphs' memory, which the next replay overwrites (torch refuses: "Gradient addition
    node due to multiple use of tensor", seen on an H200 with BERT's tied embedding and decoder weights);
    so ``TrainStep`` takes each micro-batch's gradients out of the graphs' memory into its own buffers.
    """
    return "reduce-overhead" if device.type == "cuda" and world == 1 else "default"


def compile_loss(objective: torch.nn.Module, mode: str) -> torch.nn.Module:
    """``torch.compile(objective, mode=mode)`` (``default``, or ``reduce-overhead``: CUDA graphs), with
    inductor's mix-order reduction (LayerNorm's backward reductions over rows and over columns fused) in its
    non-strict mode, where it does not ask whether a reduction is large enough. The strict mode's question
    became a guard on rows × loss slots that failed once the update's masked positions passed ~6,800: a
    recompilation at update 393 of the paper setting, 45 s of a fresh BERT-base run on an H100. Older
    torch, without the option, compiles as before."""
    options = {"triton.cudagraphs": mode == "reduce-overhead"}
    if hasattr(torch._inductor.config.triton, "mix_order_reduction_non_strict_mode"):
        options["triton.mix_order_reduction_non_strict_mode"] = True
    return torch.compile(objective, options=options)


SLOTTED = (1, 2, 3)
"""Which of ``MicroBatch.tensors()`` have a loss-slot dimension (positions, targets, weights)."""


def let_shapes_vary(tensors: Sequence[torch.Tensor], rows_dim: int = 0) -> None:
    """Tell torch.compile that a micro-batch's rows and loss slots change from update to update (their
    counts are ``batch.bucket``ed), so that it compiles one graph for all of them. Left to itself it
    compiles the first shape as fixed and recompiles at the first other count of each: for BERT-base on an
    H100, 38–47 s at updates 5 and 7 and again at update 393 of the paper setting. A mark that only
    torch.compile reads: an eager step runs as before. ``rows_dim``: 0 for one run's tensors, 1 for stacked runs' (runs first)."""
    for index, tensor in enumerate(tensors):
        torch._dynamo.maybe_mark_dynamic(tensor, rows_dim)
        if index in SLOTTED:
            torch._dynamo.maybe_mark_dynamic(tensor, rows_dim + 1)


class TrainStep:
    """Forward/backward over the micro-batches of one step, gradient clipping and the optimizer update."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        config: TrainConfig,
        device: torch.device,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
        world: int = 1,
        mode: str | None = None,
    ):
        """``autocast``: the mixed-precision context of a forward pass; ``mode``: torch.compile's mode
        when compiling (``None`` = ``compile_mode(device, world)``)."""
        self.model, self.optimizer, self.config = model, optimizer, config
        self.device, self.autocast, self.world = device, autocast, world
        objective: torch.nn.Module = LanguageModelLoss(model, config.reg_weight, config.reg_target)
        self.graphs = False
        if config.compiles_on(device.type):
            mode = mode or compile_mode(device, world)
            self.graphs = mode == "reduce-overhead"
            objective = compile_loss(objective, mode)
        self.captured = (
            CapturedUpdate(model, optimizer, config)
            if self.graphs and config.records_update_on(device.type, world)
            else None
        )
        if world > 1:
            objective = torch.nn.parallel.DistributedDataParallel(objective)
        self.objective = objective

    def __call__(self, micro_batches: Sequence[MicroBatch], lr: float) -> StepLosses:
        """One update over ``micro_batches``, whose loss positions' weights sum to 1 over the update."""
        set_learning_rate(self.optimizer, lr)
        loss = torch.zeros((), device=self.device)
        lm_loss = torch.zeros((), device=self.device)
        gradients = GradientSum() if self.graphs and len(micro_batches) > 1 else None
        for micro, batch in enumerate(micro_batches):
            last = micro == len(micro_batches) - 1
            sync = contextlib.nullcontext() if last or self.world == 1 else self.objective.no_sync()
            tensors = batch.tensors()
            let_shapes_vary(tensors)
            with sync, self.autocast():
                micro_loss, micro_lm_loss = self.objective(*tensors)
                micro_loss.backward()
            loss += micro_loss.detach()
            lm_loss += micro_lm_loss.detach()
            if gradients is not None:
                gradients.take(self.model, first=micro == 0)
        if gradients is not None:
            gradients.give(self.model)
        if self.world > 1:  # the mean over ranks, not rank 0's share
            for value in (loss, lm_loss):
                dist.all_reduce(value)
                value /= self.world
        return StepLosses(loss, lm_loss, self.apply_update())

    def apply_update(self) -> torch.Tensor:
        """Clip the gradients, step AdamW and let the gradients go; the norm before clipping. A method of its
        own so that a benchmark can put another form of the same update in its place."""
        if self.captured is not None:
            return self.captured()
        grad_norm = clip_and_step(self.model.parameters(), self.optimizer, self.config.grad_clip or math.inf)
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm


def clip_and_step(
    parameters: Iterable[torch.nn.Parameter], optimizer: torch.optim.Optimizer, limit: float
) -> torch.Tensor:
    """The update's arithmetic, whatever runs it (eagerly, recorded or compiled): the gradients of
    ``parameters`` clipped to norm ``limit``, then the optimizer's step; the norm before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(parameters, limit)
    optimizer.step()
    return norm


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every group's learning rate; a tensor rate (an optimizer captured in a CUDA graph reads it from device
    memory) is filled in place, so the graph sees the new value."""
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr


CAPTURE_AFTER = 3
"""Updates that ``CapturedUpdate`` runs eagerly before it records its graph: they make AdamW's state."""


class CapturedUpdate:
    """Clip + AdamW recorded once as a CUDA graph over gradient buffers of fixed address, then replayed: an
    update is one copy of the gradients into the buffers and one replay, in place of the eager clip's and
    AdamW's Python and kernel launches (on BERT-mini about a third of the host's time in the step, which
    bounds its speed on an H200). The gradients are the loss graphs' outputs, which their next replay
    overwrites, hence the copy. The optimizer becomes capturable, its learning rates device tensors that
    ``set_learning_rate`` fills in place, so the graph reads each update's rate. The first ``CAPTURE_AFTER``
    updates run eagerly; off CUDA nothing is captured and every update runs eagerly on the buffers (what a
    CPU test can check: the same arithmetic as ``apply_update``'s)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, config: TrainConfig):
        self.params = list(model.parameters())
        self.optimizer, self.limit = optimizer, config.grad_clip or math.inf
        device = self.params[0].device
        self.cuda = device.type == "cuda"
        if self.cuda:  # after a checkpoint's load, which sets the saved rates
            for group in optimizer.param_groups:
                group["lr"] = torch.tensor(float(group["lr"]), device=device)
                group["capturable"] = True
        self.taken: list[torch.nn.Parameter] = []
        self.buffers: list[torch.Tensor] = []
        self.graph: torch.cuda.CUDAGraph | None = None
        self.norm: torch.Tensor
        self.done = 0

    def __call__(self) -> torch.Tensor:
        """One update from the parameters' gradients; the norm before clipping."""
        if not self.taken:  # the parameters that get gradients, fixed from the first update on
            self.taken = [p for p in self.params if p.grad is not None]
            self.buffers = [p.grad.clone() for p in self.taken]
        elif sum(p.grad is not None for p in self.params) != len(self.taken):
            raise RuntimeError("update_graph: the parameters with gradients changed after the first update")
        else:
            torch._foreach_copy_(self.buffers, [p.grad for p in self.taken])
        for param, buffer in zip(self.taken, self.buffers, strict=True):
            param.grad = buffer
        if self.graph is not None:
            self.graph.replay()
        elif self.cuda and self.done >= CAPTURE_AFTER:
            self.graph = torch.cuda.CUDAGraph()
            # thread_local: the feed's thread goes on copying the next micro-batches meanwhile
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.norm = clip_and_step(self.taken, self.optimizer, self.limit)
            self.graph.replay()
        else:
            self.norm = clip_and_step(self.taken, self.optimizer, self.limit)
        self.done += 1
        self.optimizer.zero_grad(set_to_none=True)  # the buffers stay; the next backward makes new gradients
        return self.norm.clone()  # out of the graph's memory, which the next replay overwrites


class GradientSum:
    """Gradients summed over micro-batches outside the CUDA graphs' memory: after each backward pass they
    are added into buffers of their own and the parameters' ``.grad`` let go, so the next replay neither
    adds into nor overwrites them."""

    def __init__(self) -> None:
        self.params: list[torch.nn.Parameter] = []
        self.sums: list[torch.Tensor] = []

    def take(self, model: torch.nn.Module, first: bool) -> None:
        if first:
            self.params = [p for p in model.parameters() if p.grad is not None]
            self.sums = [p.grad.clone() for p in self.params]
        else:
            torch._foreach_add_(self.sums, [p.grad for p in self.params])
        for param in self.params:
            param.grad = None

    def give(self, model: torch.nn.Module) -> None:
        for param, total in zip(self.params, self.sums, strict=True):
            param.grad = total


def micro_batch_indices(config: TrainConfig, steps: range, rank: int, world: int) -> Iterator[int]:
    """Indices of the micro-batches a rank uses in ``steps``: ranks interleave, micro-batches follow on."""
    for step in steps:
        for micro in range(config.grad_accum):
            yield (step * config.grad_accum + micro) * world + rank


def with_segments(batch: MicroBatch) -> MicroBatch:
    """The micro-batch with its document segments, for the variable-length attention kernel."""
    return replace(batch, segments=document_segments(batch.documents))


def feed(
    batches: PackedBatches,
    indices: Iterable[int],
    device: torch.device,
    ahead: int = FEED_AHEAD,
    segments: bool = False,
) -> Iterator[MicroBatch]:
    """``batches[i]`` for each index on ``device``, built ``ahead`` batches in advance on one thread
    (``segments``: with their document segments)."""
    pin = device.type == "cuda"

    def build(index: int) -> MicroBatch:
        batch = with_segments(batches[index]) if segments else batches[index]
        return batch.apply(torch.Tensor.pin_memory) if pin else batch

    pending: deque = deque()
    order = iter(indices)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="attngeom-feed") as pool:
        for index in order:
            pending.append(pool.submit(build, index))
            if len(pending) > ahead:
                yield pending.popleft().result().to(device)
        while pending:
            yield pending.popleft().result().to(device)


def grouped(items: Iterator[MicroBatch], size: int) -> Iterator[Sequence[MicroBatch]]:
    """Consecutive groups of ``size`` (the micro-batches of one optimizer step)."""
    while group := [batch for _, batch in zip(range(size), items, strict=False)]:
        yield group


def feed_updates(
    batches: DocumentBatches,
    steps: Iterable[int],
    device: torch.device,
    ahead: int = FEED_AHEAD,
    segments: bool = False,
) -> Iterator[Update]:
    """``batches.update(t)`` for each step on ``device``, built ``ahead`` updates in advance on one thread
    (``segments``: each micro-batch with its document segments)."""
    pin = device.type == "cuda"

    def build(step: int) -> Update:
        update = batches.update(step)
        micro_batches = [with_segments(b) for b in update.micro_batches] if segments else update.micro_batches
        if pin:
            micro_batches = [b.apply(torch.Tensor.pin_memory) for b in micro_batches]
        return replace(update, micro_batches=micro_batches)

    pending: deque = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="attngeom-feed") as pool:
        for step in steps:
            pending.append(pool.submit(build, step))
            if len(pending) > ahead:
                yield _to(pending.popleft().result(), device)
        while pending:
            yield _to(pending.popleft().result(), device)


def _to(update: Update, device: torch.device) -> Update:
    return replace(update, micro_batches=[b.to(device) for b in update.micro_batches])
