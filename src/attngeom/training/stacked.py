"""Several runs that differ only in seed and init, trained together in one process and one compiled step.

Each run keeps what ``train`` gives it: its own init (from its seed), its own data order (its seed's
updates), its own folder with the same ``loss.parquet``, ``scores.parquet``, checkpoints (loadable by a run
trained alone) and ``final/``. Only the arithmetic is shared: the weights are stacked (``StackedLoss``), one
fused AdamW steps them all (AdamW is element-wise, so it equals one AdamW per run at the same step and
learning rate) and the gradient is clipped run by run, each by its own norm.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal

import torch
from tqdm.auto import tqdm

from .batch import IGNORED, MicroBatch, Update
from .bookkeeping import LossLog, ParquetLog, Schedule, StepRecord, progress_since
from .checkpoint import CheckpointWriter, held_checkpoints, load_checkpoint
from .config import ConfigError, TrainConfig
from .corpus import load_corpus
from .document_batches import DocumentBatches
from .document_mask import row_segments, stacked_segments
from .loop import (
    Runtime,
    decays,
    learning_rate,
    make_optimizer,
    runtime_for,
    save_final,
    score_live,
    stopwatch,
    updates_ahead,
)
from .memory import check_fits, rows_per_pass
from .model import build_model
from .runs import Restart, RunFolder
from .stacked_model import StackedLoss
from .step import GradientSum, StepLosses, compile_loss, compile_mode, let_shapes_vary, set_learning_rate
from .stream_batches import PackedBatches

logger = logging.getLogger(__name__)

VARYING = ("seed", "init")
"""The settings in which runs trained together may differ."""


def check_stackable(configs: Sequence[TrainConfig], outs: Sequence[Path]) -> None:
    """One line naming the first pair of runs that cannot share a step (other shapes, data or schedules)."""
    if len(configs) != len(outs) or not configs:
        raise ConfigError("stacked training needs one run folder per run")
    if len(set(outs)) != len(outs):
        raise ConfigError("stacked runs need a folder each: two runs name the same --out folder")
    if configs[0].update_graph:  # the stacked step clips per run, outside TrainStep's recorded update
        raise ConfigError(
            "update_graph is not available for stacked runs (several --seeds or --inits): leave it "
            "unset (null: off for stacked runs) or set update_graph=false, or train the runs one a process"
        )
    first = configs[0].to_dict()
    for config, out in zip(configs[1:], outs[1:], strict=True):
        other = config.to_dict()
        differ = [
            f"{k}: {first[k]!r} vs {other[k]!r}" for k in first if k not in VARYING and first[k] != other[k]
        ]
        if differ:
            raise ConfigError(
                f"runs {outs[0]} and {out} cannot train stacked: they differ in {'; '.join(differ)} "
                f"(only {' and '.join(VARYING)} may differ); train them separately"
            )


class StackedStep:
    """One update of every run: forward/backward over the runs' micro-batches side by side, per-run
    clipping, one AdamW step; like ``TrainStep`` (compiled, CUDA graphs on one GPU)."""

    def __init__(
        self,
        objective: StackedLoss,
        optimizer: torch.optim.Optimizer,
        config: TrainConfig,
        device: torch.device,
        autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ):
        self.stacked, self.optimizer, self.config = objective, optimizer, config
        self.device, self.autocast = device, autocast
        self.graphs = False
        self.objective: torch.nn.Module = objective
        if config.compiles_on(device.type):
            mode = compile_mode(device, 1)
            self.graphs = mode == "reduce-overhead"
            self.objective = compile_loss(objective, mode)

    def __call__(self, updates: Sequence[Update], lr: float) -> StepLosses:
        """Each run's update; losses and gradient norms come back as (R,) tensors on the device."""
        set_learning_rate(self.optimizer, lr)
        runs = len(updates)
        loss = torch.zeros(runs, device=self.device)
        lm_loss = torch.zeros(runs, device=self.device)
        count = max(len(u.micro_batches) for u in updates)
        rows = max(b.input_ids.shape[0] for u in updates for b in u.micro_batches)
        slots = max(b.positions.shape[1] for u in updates for b in u.micro_batches)
        gradients = GradientSum() if self.graphs and count > 1 else None
        for micro in range(count):
            shares = [_share(u.micro_batches, micro) for u in updates]
            batches = [replace(b, segments=None).padded(rows, slots) for b in shares]
            tensors = [torch.stack(parts) for parts in zip(*(b.tensors() for b in batches), strict=True)]
            let_shapes_vary(tensors, rows_dim=1)
            if shares[0].segments is not None:
                own, length = [b.segments for b in shares], shares[0].input_ids.shape[1]
                segments = stacked_segments(own, [len(b.input_ids) for b in shares], rows, length)
                torch._dynamo.maybe_mark_dynamic(segments, 0)
                tensors.append(segments)
            with self.autocast():
                micro_loss, micro_lm_loss = self.objective(*tensors)
                micro_loss.sum().backward()
            loss += micro_loss.detach()
            lm_loss += micro_lm_loss.detach()
            if gradients is not None:
                gradients.take(self.stacked, first=micro == 0)
        if gradients is not None:
            gradients.give(self.stacked)
        grad_norm = clip_per_run(list(self.stacked.parameters()), self.config.grad_clip or math.inf)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepLosses(loss, lm_loss, grad_norm)


def _share(micro_batches: Sequence[MicroBatch], micro: int) -> MicroBatch:
    """A run's ``micro``-th micro-batch; past its last, an empty one (no loss) of the same shape, so that
    runs whose updates need fewer passes step beside the others."""
    if micro < len(micro_batches):
        return micro_batches[micro]
    empty = micro_batches[0].apply(torch.zeros_like)
    empty = replace(empty, targets=torch.full_like(empty.targets, IGNORED))
    if empty.segments is None:
        return empty
    rows, length = empty.input_ids.shape
    return replace(empty, segments=row_segments(rows, length).to(empty.segments.device))


@torch.no_grad()
def clip_per_run(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` of each run on its own: stacked gradients (R, …); returns the norms (R,)."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in grads]).norm(dim=0)
    if math.isfinite(max_norm):
        scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale.view(-1, *[1] * (g.dim() - 1)).to(g.dtype))
    return norms


def train_stacked(
    configs: Sequence[TrainConfig],
    outs: Sequence[str | Path],
    *,
    progress: bool | Literal["lines"] = True,
    stop_at: int | None = None,
    restart: Restart = "never",
) -> list[Path]:
    """``train(config, out)`` for every pair, in one process: the runs step together (``StackedStep``);
    returns their folders. All must differ only in seed and init; resumed, all from the same step."""
    outs = [Path(out) for out in outs]
    check_stackable(configs, outs)
    config = configs[0]
    if stop_at is not None and stop_at < 1:
        raise ConfigError(f"stop_at={stop_at}: must be a step ≥ 1")
    folders = [RunFolder(out) for out in outs]
    rt = runtime_for(config)
    configs = [c.for_device(rt.device.type) for c in configs]
    if rt.world > 1:
        raise ConfigError("stacked runs train in one process on one GPU: launch without torchrun")
    check_fits(config, rt.device, runs=len(configs))  # before anything is written
    with contextlib.ExitStack() as locks:  # each folder locked while its run trains
        for folder, run in zip(folders, configs, strict=True):
            locks.enter_context(folder.claim(run, restart))
        _train_stacked(configs, folders, rt, progress, stop_at)
    return [f.path for f in folders]


def _train_stacked(
    configs: Sequence[TrainConfig],
    folders: list[RunFolder],
    rt: Runtime,
    progress: bool | Literal["lines"],
    stop_at: int | None,
) -> None:
    """``train_stacked`` once its folders are claimed."""
    config = configs[0]
    corpus = load_corpus(config, progress=progress is True)
    check_fits(config, rt.device, corpus.vocab_size, runs=len(configs))
    rows = rows_per_pass(
        config, rt.device, corpus.vocab_size, runs=len(configs), verbose=progress is not False
    )
    batches = [
        DocumentBatches(corpus, c, rows) if c.batch_documents else PackedBatches(corpus, c) for c in configs
    ]
    models = []
    for run in configs:
        torch.manual_seed(run.seed)
        models.append(build_model(run, corpus.vocab_size).to(rt.device).train())
    optimizers = [make_optimizer(m, c, rt.device) for m, c in zip(models, configs, strict=True)]
    for folder, run in zip(folders, configs, strict=True):
        folder.begin(run, corpus)
    start, elapsed = _resume(folders, models, optimizers, rt.device, config.steps)
    objective = StackedLoss(models, config.reg_weight, config.reg_target)
    optimizer = _stacked_optimizer(objective, models[0], config, rt.device)
    _stack_moments(optimizer, optimizers)
    train_step = StackedStep(objective, optimizer, config, rt.device, rt.autocast)

    end = config.steps if stop_at is None else min(stop_at, config.steps)
    when = Schedule.of(config, end)
    losses = [LossLog(f.loss, keep_through=start) for f in folders]
    tokens_before = [log.tokens for log in losses]
    scores = [ParquetLog(f.scores, keep_through=start - 1) for f in folders]
    if when.score(start):
        for model, folder, log in zip(models, folders, scores, strict=True):
            log.append(score_live(model, folder.path.name, start))
    feeds = [updates_ahead(b, c, range(start, end), rt) for b, c in zip(batches, configs, strict=True)]
    clocks = [stopwatch(e) for e in elapsed]
    bar = tqdm(
        range(start, end),
        initial=start,
        total=config.steps,
        desc=f"{len(configs)} runs",
        disable=progress is not True,
    )
    with CheckpointWriter(keep_previous=True) as checkpoints:  # written while the next updates run
        for step in bar:
            lr = learning_rate(config, step)
            updates = [next(feed) for feed in feeds]
            result = train_step(updates, lr)
            done = step + 1
            for r, (log, update, clock) in enumerate(zip(losses, updates, clocks, strict=True)):
                log.record(
                    StepRecord(
                        done,
                        result.loss[r],
                        result.lm_loss[r],
                        result.grad_norm[r],
                        lr,
                        clock(),
                        update.tokens,
                        update.documents,
                    )
                )
            if when.log(done):
                for r, (log, folder, clock) in enumerate(zip(losses, folders, clocks, strict=True)):
                    loss = log.flush(clock, write=when.checkpoint(done))
                    if progress == "lines":
                        tokens, seconds = log.tokens - tokens_before[r], clock() - elapsed[r]
                        line = progress_since(done, config.steps, loss, tokens, seconds, start)
                        print(f"{folder.path.name}: {line}", flush=True)
            if when.score(done):
                for model, folder, log in zip(models, folders, scores, strict=True):
                    log.append(score_live(model, folder.path.name, done))
            if when.checkpoint(done):
                for r, (model, folder, clock) in enumerate(zip(models, folders, clocks, strict=True)):
                    moments = _run_moments(optimizer, optimizers[r], r, lr)
                    state = _owned(model.state_dict())
                    checkpoints.save(folder.checkpoint, state, moments, done, clock(), rt.device)
        bar.close()
    if end == config.steps:
        for model, folder in zip(models, folders, strict=True):
            save_final(model, corpus, folder.final)


def _resume(
    folders: list[RunFolder], models: list, optimizers: list, device: torch.device, steps: int
) -> tuple[int, list[float]]:
    """Each run's checkpoint into its own model and optimizer: (the common step, each run's elapsed s).

    The runs' checkpoints are written one after the other, each keeping the one it replaces
    (``CheckpointWriter(keep_previous=True)``): a process killed between two writes leaves the runs one
    checkpoint apart, and they resume from the newest step all of them hold (step 0: afresh)."""
    held = [held_checkpoints(f.checkpoint) for f in folders]
    common = max(set.intersection(*(set(h) for h in held)), default=0)
    newest = max((max(h) for h in held if h), default=0)
    if newest > common:
        logger.warning(
            "attngeom: resuming the stacked runs from step %d, the newest step all of them hold (a run "
            "holds step %d)",
            common,
            newest,
        )
    for folder, checkpoints in zip(folders, held, strict=True):
        _keep_through(folder.checkpoint, checkpoints, common)
    if not common:
        return 0, [0.0] * len(folders)
    loaded = [
        load_checkpoint(f.checkpoint, m, o, device, steps)
        for f, m, o in zip(folders, models, optimizers, strict=True)
    ]
    return common, [seconds for _, seconds in loaded]


def _keep_through(latest: Path, checkpoints: dict[int, Path], step: int) -> None:
    """A run's checkpoints past ``step`` dropped and the one at ``step`` made its latest: the next write
    then keeps it as the previous one until every run has written the next (a run resumed from its
    previous checkpoint would otherwise drop the one step all runs share)."""
    for held_step, path in sorted(checkpoints.items(), reverse=True):
        if held_step > step:
            path.unlink()
        elif held_step == step and path != latest:
            os.replace(path, latest)


def _stacked_optimizer(
    objective: StackedLoss, model: torch.nn.Module, config: TrainConfig, device: torch.device
) -> torch.optim.AdamW:
    """``make_optimizer``'s groups over the stacked weights, in the same order (so index i of a run's
    optimizer state is stacked parameter i)."""
    shapes = dict(model.named_parameters())
    decay = [objective.w(n) for n in objective.names if decays(n, shapes[n].ndim)]
    no_decay = [objective.w(n) for n in objective.names if not decays(n, shapes[n].ndim)]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, fused=device.type == "cuda")


def _ordered(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def _stack_moments(optimizer: torch.optim.Optimizer, runs: list[torch.optim.Optimizer]) -> None:
    """Resumed runs' AdamW moments into the stacked optimizer (then dropped from the runs' own)."""
    per_run = [_ordered(o) for o in runs]
    for i, param in enumerate(_ordered(optimizer)):
        states = [o.state.get(params[i]) for o, params in zip(runs, per_run, strict=True)]
        if states[0]:
            optimizer.state[param] = {
                "step": states[0]["step"].clone(),
                **{k: torch.stack([s[k] for s in states]) for k in ("exp_avg", "exp_avg_sq")},
            }
    for o in runs:
        o.state.clear()


def _run_moments(optimizer: torch.optim.Optimizer, run: torch.optim.Optimizer, r: int, lr: float) -> dict:
    """Run ``r``'s optimizer state dict, as its own AdamW would write it."""
    state = {}
    for i, param in enumerate(_ordered(optimizer)):
        moments = optimizer.state.get(param)
        if moments:
            state[i] = {k: v.clone() if k == "step" else v[r].clone() for k, v in moments.items()}
    groups = run.state_dict()["param_groups"]
    return {"state": state, "param_groups": [dict(g, lr=lr) for g in groups]}


def _owned(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Copies that own their memory (``torch.save`` of a view writes the whole stacked tensor); tied
    weights stay tied."""
    copies: dict[tuple, torch.Tensor] = {}
    out = {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key not in copies:
            copies[key] = tensor.clone()
        out[name] = copies[key]
    return out
