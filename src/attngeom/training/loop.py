"""One training run, as one readable loop (after nanoGPT): build, resume, step, log, score, checkpoint.

A run lives in one folder: ``config.yaml``, ``loss.parquet`` (one row per optimizer step),
``scores.parquet`` (attngeom scores of the live model at every score interval, with ``step``),
``checkpoint/state.pt`` (latest, written atomically) and, at the end, ``final/`` (save_pretrained).
Killed at any moment, the same command resumes from the checkpoint and writes the same loss log.
Several GPUs: launch with ``torchrun``; each rank takes its own micro-batches, rank 0 writes.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerFast

from .checkpoint import load_checkpoint, save_checkpoint
from .config import ConfigError, TrainConfig, make_config, read_config_file, write_config
from .data import Corpus, PackedBatches, load_corpus
from .model import LanguageModelLoss, build_model


@dataclass(frozen=True)
class Runtime:
    device: torch.device
    autocast_dtype: torch.dtype | None
    rank: int
    world: int

    @property
    def main(self) -> bool:
        return self.rank == 0


def runtime_for(config: TrainConfig) -> Runtime:
    """Device, mixed precision and DDP rank from the config and the torchrun environment."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    cuda = config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training setting device=cuda but no CUDA device is available")
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


def make_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with no weight decay on biases and LayerNorm weights (as transformers' Trainer does)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=config.lr, fused=device.type == "cuda")


def write_parquet(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)


def _read_until(path: Path, step: int) -> list[pd.DataFrame]:
    """Rows of a log written up to ``step`` (a resumed run drops what came after its checkpoint)."""
    if not path.exists():
        return []
    frame = pd.read_parquet(path)
    return [frame[frame["step"] <= step]]


def score_live(model: torch.nn.Module, config: TrainConfig, step: int) -> pd.DataFrame:
    """attngeom's scores of the live model, tagged with the step and what the run trains."""
    from attngeom import score

    frame = score(model, progress=False, model_id=f"{config.objective}-{config.init}")
    return frame.assign(step=step, training_objective=config.objective, init=config.init)


def save_final(model: torch.nn.Module, corpus: Corpus, folder: Path) -> None:
    """``save_pretrained`` (safetensors) plus the tokenizer, renamed into place when complete."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    special = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    PreTrainedTokenizerFast(
        tokenizer_object=corpus.tokenizer, mask_token="[MASK]", **special
    ).save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def train(config: TrainConfig, out: str | Path, *, progress: bool = True, stop_at: int | None = None) -> Path:
    """Train (or resume) the run in folder ``out``; returns it. ``stop_at``: leave after that step as if
    interrupted (no final model), e.g. to fit a job's time limit; the next call resumes."""
    out = Path(out)
    rt = runtime_for(config)
    if rt.main:
        out.mkdir(parents=True, exist_ok=True)
        _check_same_config(config, out)
        corpus = load_corpus(config, progress=progress)
    if rt.world > 1:
        dist.barrier()
    if not rt.main:
        corpus = load_corpus(config, progress=False)
    batches = PackedBatches(corpus, config)

    torch.manual_seed(config.seed)
    model = build_model(config, corpus.vocab_size).to(rt.device)
    model.train()
    objective: torch.nn.Module = LanguageModelLoss(model, config.reg_weight, config.reg_target)
    optimizer = make_optimizer(model, config, rt.device)

    start, elapsed = 0, 0.0
    ckpt = out / "checkpoint" / "state.pt"
    if ckpt.exists():  # weights, optimizer moments, step, and the RNG state that drives dropout
        start, elapsed = load_checkpoint(ckpt, model, optimizer, rt.device)

    if config.compile:
        objective = torch.compile(objective)
    if rt.world > 1:
        objective = torch.nn.parallel.DistributedDataParallel(objective)

    losses = _read_until(out / "loss.parquet", start)
    scores = _read_until(out / "scores.parquet", start)
    if rt.main and start == 0:
        scores = [score_live(model, config, 0)]
        write_parquet(pd.concat(scores, ignore_index=True), out / "scores.parquet")

    tokens_per_step = config.batch_size * config.seq_len * config.grad_accum * rt.world
    pending: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, float, float]] = []
    clock = time.perf_counter()
    end = config.steps if stop_at is None else min(stop_at, config.steps)
    bar = tqdm(
        range(start, end),
        initial=start,
        total=config.steps,
        desc=out.name,
        disable=not (progress and rt.main),
    )
    for step in bar:
        lr = learning_rate(config, step)
        for group in optimizer.param_groups:
            group["lr"] = lr
        total = torch.zeros((), device=rt.device)
        lm_total = torch.zeros((), device=rt.device)
        for micro in range(config.grad_accum):
            batch = batches[(step * config.grad_accum + micro) * rt.world + rt.rank].to(rt.device)
            last = micro == config.grad_accum - 1
            sync = contextlib.nullcontext() if last or rt.world == 1 else objective.no_sync()
            with sync, _autocast(rt):
                loss, lm_loss = objective(batch.input_ids, batch.positions, batch.targets)
                (loss / config.grad_accum).backward()
            total += loss.detach() / config.grad_accum
            lm_total += lm_loss.detach() / config.grad_accum
        if rt.world > 1:  # log the mean over ranks, not rank 0's share
            for value in (total, lm_total):
                dist.all_reduce(value)
                value /= rt.world
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip or math.inf)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        pending.append((done, total, lm_total, grad_norm, lr, elapsed + time.perf_counter() - clock))

        if rt.main and (done % config.log_every == 0 or done % config.checkpoint_every == 0 or done == end):
            losses.append(_flush(pending, tokens_per_step, lambda: elapsed + time.perf_counter() - clock))
            pending = []
            write_parquet(pd.concat(losses, ignore_index=True), out / "loss.parquet")
            bar.set_postfix(loss=f"{losses[-1]['loss'].iloc[-1]:.3f}")
        if rt.main and (done % config.score_every == 0 or done == config.steps):
            scores.append(score_live(model, config, done))
            write_parquet(pd.concat(scores, ignore_index=True), out / "scores.parquet")
        if rt.main and (done % config.checkpoint_every == 0 or done == end):
            save_checkpoint(ckpt, model, optimizer, done, elapsed + time.perf_counter() - clock, rt.device)
    bar.close()

    if rt.main and end == config.steps:
        save_final(model, corpus, out / "final")
    if rt.world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return out


def _autocast(rt: Runtime) -> contextlib.AbstractContextManager:
    if rt.autocast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(rt.device.type, dtype=rt.autocast_dtype)


def _flush(pending: list, tokens_per_step: int, now: Callable[[], float]) -> pd.DataFrame:
    """Pending per-step tensors → rows, with one device sync per log interval, not per step.

    ``elapsed_s`` is the time a step was queued, except on the last row, where it is taken after the sync
    (so differences between log steps are true wall-clock durations).
    """
    values = torch.stack([torch.stack([t, m, g.float()]) for _, t, m, g, _, _ in pending]).double().cpu()
    elapsed = [p[5] for p in pending[:-1]] + [now()]
    frame = pd.DataFrame(
        {
            "step": [p[0] for p in pending],
            "loss": values[:, 0].numpy(),
            "lm_loss": values[:, 1].numpy(),
            "grad_norm": values[:, 2].numpy(),
            "lr": [p[4] for p in pending],
            "tokens": [p[0] * tokens_per_step for p in pending],
            "elapsed_s": elapsed,
        }
    )
    if not math.isfinite(float(frame["loss"].iloc[-1])):
        raise FloatingPointError(
            f"training loss became {frame['loss'].iloc[-1]} at step {frame['step'].iloc[-1]}"
        )
    return frame


def _check_same_config(config: TrainConfig, out: Path) -> None:
    """A run folder holds one config; resuming with another would mix two runs."""
    path = out / "config.yaml"
    if path.exists() and make_config(read_config_file(path)) != config:
        raise ConfigError(
            f"{path} holds a different training config; use a new --out folder or the same settings"
        )
    write_config(config, path)
