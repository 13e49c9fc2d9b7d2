"""How many rows of an update go through the model in one pass: all of them where the device's free memory
holds them, so that an update counted in documents takes one forward/backward pass by default.

``batch_size`` is then only an upper bound, for memory (a GPU shared with other processes, say). The
estimate is deliberately high (activations kept in fp32, the LM head's logits at half again as many
positions as ``mlm_probability`` picks): too few rows a pass costs speed, too many an out-of-memory error.
"""

from __future__ import annotations

import os
import sys

import torch

from .config import ConfigError, TrainConfig

FREE_SHARE = 0.6
"""Share of the memory free at the start that a run's passes may plan to use (the rest: the allocator's
slack, CUDA graphs' pools, the optimizer's growth)."""
CPU_ROWS = 32
"""Rows a pass where the free memory cannot be read."""


def bytes_per_row(config: TrainConfig, vocab_size: int) -> int:
    """Memory one row of ``seq_len`` tokens holds during a pass: each layer's saved activations (about 16
    hidden-sized and 3 intermediate-sized vectors a token, counted in fp32) and the LM head's logits, their
    fp32 copy and gradient at the loss positions."""
    per_token = config.n_layers * (16 * config.hidden + 3 * config.intermediate) * 4
    loss_positions = (
        config.seq_len if not config.uses_masking else 1.5 * config.mlm_probability * config.seq_len
    )
    return int(config.seq_len * per_token + loss_positions * vocab_size * 10)


BYTES_PER_PARAMETER = 16
"""Training memory of one parameter: its float32 weight and gradient and AdamW's two moments."""
GRADIENT_COPY_BYTES = 4
"""A parameter's float32 gradient kept once more: the recorded update's buffers (``step.CapturedUpdate``)."""


def check_fits(
    config: TrainConfig,
    device: torch.device,
    vocab_size: int | None = None,
    runs: int = 1,
    gradient_copy: bool = False,
) -> None:
    """Refuse, in one line, ``runs`` models of ``config`` that ``device`` could not hold even with all of
    its memory free: their parameters (``BYTES_PER_PARAMETER`` each, and ``GRADIENT_COPY_BYTES`` more with
    ``gradient_copy``: the recorded update's) and one pass of their rows (the token stream's micro-batch,
    or one row counted in documents: ``bytes_per_row``), from the settings alone, before anything is
    allocated. ``vocab_size`` None: the largest the settings allow (a ``wordpiece`` tokenizer's
    ``vocab_size``; another vocabulary is counted when the corpus is read)."""
    total = total_bytes(device)
    if vocab_size is None:
        vocab_size = config.vocab_size if config.tokenizer == "wordpiece" else 0
    if total is None:
        return
    parameters = config.parameters(vocab_size)
    per_parameter = BYTES_PER_PARAMETER + (GRADIENT_COPY_BYTES if gradient_copy else 0)
    rows = 1 if config.batch_documents else config.micro_batch_rows
    need = runs * (parameters * per_parameter + rows * bytes_per_row(config, vocab_size))
    if need > total:
        models = (
            f"{runs} models of {parameters:,} parameters"
            if runs > 1
            else f"a model of {parameters:,} parameters"
        )
        raise ConfigError(
            f"training settings make {models} (n_layers={config.n_layers}, hidden_size={config.hidden}, "
            f"intermediate_size={config.intermediate}, vocab_size={vocab_size}, seq_len={config.seq_len}): "
            f"training needs ≈ {need / 2**30:,.1f} GiB ({per_parameter} bytes a parameter and {rows} "
            f"row{'s' if rows > 1 else ''} of activations), more than the {total / 2**30:,.1f} GiB of {device}; "
            "choose smaller sizes (or batch_size)"
        )


def total_bytes(device: torch.device) -> int | None:
    """All the memory of ``device`` (a CUDA GPU's, else the host's RAM); None where unknown."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def free_bytes(device: torch.device) -> int | None:
    """Free memory of ``device`` (a CUDA GPU's, else the host's available RAM); None where unknown."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def rows_per_pass(
    config: TrainConfig, device: torch.device, vocab_size: int, runs: int = 1, verbose: bool = False
) -> int:
    """The most rows a pass of ``runs`` runs trained together may take on ``device``: what its free
    memory holds (``FREE_SHARE``), at most ``batch_size``; with ``verbose``, one line saying so."""
    free = free_bytes(device)
    row = bytes_per_row(config, vocab_size) * runs
    fits = CPU_ROWS if free is None else max(1, int(free * FREE_SHARE // row))
    rows = min(fits, config.batch_size or fits)
    if verbose:
        room = "free memory unknown" if free is None else f"{free / 2**30:.1f} GiB free on {device}"
        cap = (
            f", batch_size={config.batch_size} caps it"
            if config.batch_size and config.batch_size < fits
            else ""
        )
        print(
            f"attngeom train: up to {rows} rows of {config.seq_len} a pass (≈ {row / 2**20:.0f} MiB a row"
            f"{f' for {runs} runs' if runs > 1 else ''}, {room}{cap})",
            file=sys.stderr,
        )
    return rows
