"""One training run, as one readable loop (after nanoGPT's train.py).

A run lives in one folder (``runs.RunFolder``): ``config.yaml``, ``corpus.json`` (SHA-256 of the
tokenizer and token stream), ``loss.parquet`` (one row per optimizer step), ``scores.parquet`` (attngeom
scores of the live model at every score interval, with ``step``), ``checkpoint/state.pt`` (latest, written
atomically) and, at the end, ``final/`` (save_pretrained). Killed at any moment, the same command resumes
from the checkpoint and writes the same loss log. Several GPUs: launch with ``torchrun``; each rank takes
its own micro-batches, rank 0 writes.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
import torch
import torch.distributed as dist
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerFast

from ..engine import score
from ..files import atomic_dir
from .batch import Update
from .bookkeeping import LossLog, ParquetLog, Schedule, StepRecord, progress_since
from .checkpoint import CheckpointWriter, held_checkpoints, load_checkpoint
from .config import ConfigError, TrainConfig
from .corpus import Corpus, load_corpus
from .document_batches import DocumentBatches
from .documents import DocumentSource
from .memory import check_fits, rows_per_pass
from .model import build_model
from .runs import Restart, RunFolder
from .step import TrainStep, feed, feed_updates, grouped, micro_batch_indices
from .stream_batches import PackedBatches


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None
    rank: int
    world: int

    @property
    def main(self) -> bool:
        return self.rank == 0

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)


def runtime_for(config: TrainConfig) -> Runtime:
    """Device, mixed precision and DDP rank from the config and the torchrun environment."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training setting device=cuda but no CUDA device is available")
    config.check_attention("cuda" if cuda else "cpu")
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    if config.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    else:
        device = torch.device("cpu")
    bf16 = config.precision == "bf16" or (config.precision == "auto" and cuda)
    return Runtime(device=device, autocast_dtype=torch.bfloat16 if bf16 else None, rank=rank, world=world)


def learning_rate(config: TrainConfig, step: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then linear decay to 0 at ``steps`` (HF's linear)."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    return config.lr * max(0.0, (config.steps - step) / max(1, config.steps - config.warmup_steps))


CPU_WARNING_FLOP = 1e12
"""Training FLOP of one step (≈ 6 × parameters × tokens) above which a CPU takes tens of seconds or more:
the paper's 4-layer encoder at its batch (32 × 8 sequences of 512 tokens) needs ≈ 9 TFLOP a step."""


def _warn_if_slow(config: TrainConfig, rt: Runtime, model: torch.nn.Module) -> None:
    """One line when ``device=auto`` found no GPU for a step this large: a run of thousands of steps would
    take days, and nothing else would say why."""
    n_params = sum(p.numel() for p in model.parameters())
    flop = 6 * n_params * config.micro_batch_rows * config.seq_len * config.grad_accum * rt.world
    if rt.main and config.device == "auto" and rt.device.type == "cpu" and flop >= CPU_WARNING_FLOP:
        print(
            f"attngeom train: warning: no CUDA device, so training runs on the CPU: ≈ {flop / 1e12:.0f} TFLOP "
            "a step, minutes on a CPU; use a GPU host, or set device=cpu to train here anyway",
            file=sys.stderr,
        )


def decays(name: str, ndim: int) -> bool:
    """Whether a parameter gets weight decay: matrices do, biases and LayerNorm weights not."""
    return ndim >= 2 and "LayerNorm" not in name


def make_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with no weight decay on biases and LayerNorm weights (as transformers' Trainer does)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (decay if decays(name, param.ndim) else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, fused=device.type == "cuda")


def score_live(model: torch.nn.Module, name: str, step: int) -> pd.DataFrame:
    """attngeom's scores of the live model, tagged with the step (what the run trains is in config.yaml),
    computed where its weights are (in float64 there): on a GPU, no copy to the host and no CPU products.
    Each row carries the scoring wing's hash (``code_hash``, ``attngeom.provenance``)."""
    device = next(model.parameters()).device
    return score(model, device=device, progress=False, model_id=name).assign(step=step)


def save_final(model: torch.nn.Module, corpus: Corpus, folder: Path) -> None:
    """``save_pretrained`` (safetensors) plus the tokenizer, in place only once complete."""
    special = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=corpus.tokenizer, mask_token="[MASK]", **special)
    with atomic_dir(folder) as temporary, _without_transformers_bars():
        model.save_pretrained(temporary)
        tokenizer.save_pretrained(temporary)


@contextlib.contextmanager
def _without_transformers_bars() -> Iterator[None]:
    """transformers' own bar ("Writing model shards") off: a run shows its progress its own way, or none."""
    from transformers.utils import logging as transformers_logging

    was_on = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            transformers_logging.enable_progress_bar()


def train(
    config: TrainConfig,
    out: str | Path,
    *,
    progress: bool | Literal["lines"] = True,
    stop_at: int | None = None,
    restart: Restart = "never",
) -> Path:
    """Train (or resume) the run in folder ``out``; returns it. ``progress``: a progress bar (True),
    nothing (False), or ``"lines"``: a line per log interval on stdout (step, loss, tokens/s, ETA), for
    a job's log file. ``stop_at``: leave after that step as if
    interrupted (no final model), e.g. to fit a job's time limit; the next call resumes. ``restart``:
    what to do with an earlier run in ``out`` (``runs.RESTART_CHOICES``); nothing is written to ``out``
    before the run really starts, so a call that fails first leaves nothing in the way of the next."""
    if stop_at is not None and stop_at < 1:
        raise ConfigError(f"stop_at={stop_at}: must be a step ≥ 1")
    folder = RunFolder(Path(out))
    rt = runtime_for(config)
    config = config.for_device(rt.device.type)
    # before anything is written
    check_fits(config, rt.device, gradient_copy=config.records_update_on(rt.device.type, rt.world))
    with folder.claim(config, restart) if rt.main else contextlib.nullcontext():  # locked while it trains
        _train(config, folder, rt, progress, stop_at)
    if rt.world > 1:
        _leave_process_group()
    return folder.path


def _leave_process_group() -> None:
    """Every rank, once ``_train`` has returned: wait for the others (rank 0 writes the final model),
    then destroy the process group.

    ``_train`` must have returned first, so that its DDP wrapper is freed while the group lives. DDP's
    reducer holds a reference to the group; freed after ``destroy_process_group`` it drops the last one,
    holding the GIL, and the gloo group's destructor then waits for gloo's worker thread, which may still
    need the GIL to free the barrier's tensors: a deadlock in which that rank never exits (2 of 41 runs on a
    busy 2-core CPU). Freed first, the reducer drops a reference that the group's Python object
    still shares, and that object's destructor lets go of the GIL."""
    dist.barrier()
    dist.destroy_process_group()


def _train(
    config: TrainConfig,
    folder: RunFolder,
    rt: Runtime,
    progress: bool | Literal["lines"],
    stop_at: int | None,
) -> None:
    """``train`` on this rank, its folder claimed: every object that holds the process group (the
    DDP-wrapped step) is a local of this function, gone when it returns."""
    # data: its source resolved once; rank 0 tokenises it (once, cached); micro-batch i is a pure
    # function of (seed, i)
    source = DocumentSource.of(config)
    corpus = _load_corpus_rank0_first(config, source, rt, progress is True)
    if config.batch_documents is not None and rt.world > 1:
        raise ConfigError("batch_documents trains on one GPU per run: launch without torchrun")

    # model and optimiser, from the seed (refused first if its vocabulary makes it too large)
    check_fits(
        config, rt.device, corpus.vocab_size, gradient_copy=config.records_update_on(rt.device.type, rt.world)
    )
    torch.manual_seed(config.seed)
    model = build_model(config, corpus.vocab_size).to(rt.device)
    model.train()
    _warn_if_slow(config, rt, model)
    optimizer = make_optimizer(model, config, rt.device)

    # an update's rows in as few passes as the device's memory allows (documents), or the token stream
    if config.batch_documents:
        rows = rows_per_pass(config, rt.device, corpus.vocab_size, verbose=progress is not False and rt.main)
        batches: PackedBatches | DocumentBatches = DocumentBatches(corpus, config, rows)
    else:
        batches = PackedBatches(corpus, config)

    # the run folder: a new run records its settings and data, a resumed one must have the same
    if rt.main:
        folder.begin(config, corpus)

    # resume: weights, optimizer moments, step, and the RNG state that drives dropout
    start, elapsed = 0, 0.0
    if held := held_checkpoints(folder.checkpoint):  # the latest, or a stacked run's one before it
        start, elapsed = load_checkpoint(held[max(held)], model, optimizer, rt.device, config.steps)

    # one optimizer step: the loss (LM cross-entropy + γ·L_c; compiled, DDP-wrapped), clipping, AdamW
    train_step = TrainStep(model, optimizer, config, rt.device, rt.autocast, rt.world)

    # logs keep their rows up to the checkpoint; the scores at the starting step are taken (again) here
    end = config.steps if stop_at is None else min(stop_at, config.steps)
    when = Schedule.of(config, end)
    losses = LossLog(folder.loss, keep_through=start)
    tokens_before = losses.tokens
    scores = ParquetLog(folder.scores, keep_through=start - 1)
    if rt.main and when.score(start):
        scores.append(score_live(model, folder.path.name, start))

    # micro-batches, built ahead on a background thread and copied to the device without blocking
    updates = updates_ahead(batches, config, range(start, end), rt)
    clock = stopwatch(elapsed)
    bar = tqdm(
        range(start, end),
        initial=start,
        total=config.steps,
        desc=folder.path.name,
        disable=not (progress is True and rt.main),
    )
    with CheckpointWriter() as checkpoints:  # each checkpoint written while the next updates run
        for step in bar:
            # forward and backward over grad_accum micro-batches, clip, step, at this step's learning rate
            lr = learning_rate(config, step)
            update = next(updates)
            result = train_step(update.micro_batches, lr)
            done = step + 1
            if not rt.main:
                continue

            # log, score and checkpoint (rank 0 only), each on its own schedule
            record = StepRecord(
                done,
                result.loss,
                result.lm_loss,
                result.grad_norm,
                lr,
                clock(),
                update.tokens,
                update.documents,
            )
            losses.record(record)
            if when.log(done):
                loss = losses.flush(clock, write=when.checkpoint(done))
                bar.set_postfix(loss=f"{loss:.3f}")
                if progress == "lines":
                    tokens, seconds = losses.tokens - tokens_before, clock() - elapsed
                    print(progress_since(done, config.steps, loss, tokens, seconds, start), flush=True)
            if when.score(done):
                scores.append(score_live(model, folder.path.name, done))
            if when.checkpoint(done):
                checkpoints.save(
                    folder.checkpoint, model.state_dict(), optimizer.state_dict(), done, clock(), rt.device
                )
        bar.close()

    # the final model, once the run's last step is done
    if rt.main and end == config.steps:
        save_final(model, corpus, folder.final)


def updates_ahead(
    batches: PackedBatches | DocumentBatches, config: TrainConfig, steps: range, rt: Runtime
) -> Iterator[Update]:
    """The updates of ``steps``, built ahead on a background thread and copied to the device without
    blocking: counted in documents, or ``grad_accum`` micro-batches of the token stream per rank; with
    their document segments where ``attention: varlen`` takes them."""
    segments = config.attention == "varlen"
    if isinstance(batches, DocumentBatches):
        yield from feed_updates(batches, steps, rt.device, segments=segments)
        return
    tokens = config.micro_batch_rows * config.seq_len * config.grad_accum * rt.world
    indices = micro_batch_indices(config, steps, rt.rank, rt.world)
    for group in grouped(feed(batches, indices, rt.device, segments=segments), config.grad_accum):
        yield Update(list(group), documents=None, tokens=tokens)


def _load_corpus_rank0_first(
    config: TrainConfig, source: DocumentSource, rt: Runtime, progress: bool
) -> Corpus:
    """Rank 0 tokenises (or finds the cache) while the other ranks wait, then they read its cache."""
    corpus = load_corpus(config, progress, source) if rt.main else None
    if rt.world > 1:
        dist.barrier()
    return corpus or load_corpus(config, False, source)


def stopwatch(offset: float) -> Callable[[], float]:
    """Seconds of training so far: ``offset`` (from the checkpoint) plus the time since this call."""
    begin = time.perf_counter()
    return lambda: offset + time.perf_counter() - begin
