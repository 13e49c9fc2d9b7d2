"""Atomic checkpoints that ``torch.load(weights_only=True)`` reads: tensors, numbers, strings only.

The data position needs no saving: micro-batch i is a pure function of (seed, i), and i follows from the
step. The learning rate is a pure function of the step too, so the step is the scheduler's whole state.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..files import atomic_path


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    elapsed_s: float,
    device: torch.device,
) -> None:
    """Written beside, then renamed over the previous checkpoint (never a half-written file)."""
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "elapsed_s": elapsed_s,
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state(device)
        if device.type == "cuda"
        else torch.empty(0, dtype=torch.uint8),
    }
    with atomic_path(path) as temporary:
        torch.save(state, temporary)


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> tuple[int, float]:
    """Restore model, optimizer and RNG state in place; returns (step, elapsed seconds)."""
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng_cpu"].cpu())
    if device.type == "cuda" and state["rng_cuda"].numel():
        torch.cuda.set_rng_state(state["rng_cuda"].cpu(), device)
    return int(state["step"]), float(state["elapsed_s"])
