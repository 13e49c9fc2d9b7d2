"""What one forward/backward pass takes, and the randomness every batch is drawn from.

A micro-batch holds model input and the loss positions: ``hidden[positions]`` must predict ``targets``,
each position weighted (``weights``); an update's weights sum to 1 over its micro-batches, so the update's
loss is their weighted sum however its rows are split into passes. The masked-LM corruption (BERT's:
of the chosen tokens 80% become [MASK], 10% a random word, 10% stay) is shared by both ways of batching.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, fields

import numpy as np
import torch

IGNORED = -100
"""Target of a loss position that carries no loss (cross-entropy's ``ignore_index``)."""


@dataclass(frozen=True)
class MicroBatch:
    """Model input and where the loss is taken; ``documents``: each token's document, when documents are
    masked from each other."""

    input_ids: torch.Tensor  # (B, L)
    positions: torch.Tensor  # (B, P)
    targets: torch.Tensor  # (B, P), IGNORED where a slot carries no loss
    weights: torch.Tensor  # (B, P) float32: each loss position's share of its update's loss
    documents: torch.Tensor | None = None  # (B, L)
    segments: torch.Tensor | None = None
    """(S + 1,) where each document of the flattened rows starts, then their total
    (``document_mask.document_segments``): for the variable-length attention kernel only."""

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors the loss takes, in the order of ``LanguageModelLoss.forward``."""
        parts = (self.input_ids, self.positions, self.targets, self.weights, self.documents, self.segments)
        return tuple(t for t in parts if t is not None)

    def apply(self, function: Callable[[torch.Tensor], torch.Tensor]) -> MicroBatch:
        """The same micro-batch with ``function`` applied to each tensor (pinning, copying to a device)."""
        present = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        return MicroBatch(**{name: function(t) for name, t in present.items()})

    def to(self, device: torch.device | str) -> MicroBatch:
        return self.apply(lambda t: t.to(device, non_blocking=True))

    def padded(self, rows: int, slots: int, pad: int = 0) -> MicroBatch:
        """The same micro-batch grown to ``rows`` rows and ``slots`` loss slots per row: the new rows hold
        ``pad`` tokens of their own document, the new slots no loss (weight 0)."""
        if self.segments is not None:
            raise ValueError("pad a micro-batch before its document segments are taken")
        grow_rows, grow_slots = rows - len(self.input_ids), slots - self.positions.shape[1]
        if grow_rows < 0 or grow_slots < 0:
            raise ValueError(
                f"cannot shrink a {tuple(self.positions.shape)} micro-batch to ({rows}, {slots})"
            )
        fill = {"input_ids": pad, "positions": 0, "targets": IGNORED, "weights": 0.0, "documents": 0}

        def grow(name: str, t: torch.Tensor) -> torch.Tensor:
            if name in ("positions", "targets", "weights"):
                t = torch.cat([t, t.new_full((len(t), grow_slots), fill[name])], dim=1)
            return torch.cat([t, t.new_full((grow_rows, t.shape[1]), fill[name])])

        names = ("input_ids", "positions", "targets", "weights", "documents")
        return MicroBatch(*(grow(n, getattr(self, n)) for n in names if getattr(self, n) is not None))


@dataclass(frozen=True)
class Update:
    """One optimizer step's micro-batches and its size."""

    micro_batches: list[MicroBatch]
    documents: int | None
    tokens: int
    """Tokens the update trains on ([CLS] and [SEP] included, padding not)."""


def position_weights(targets: torch.Tensor) -> torch.Tensor:
    """Each loss position's weight: 1/N over the N positions that carry a loss."""
    carries = targets != IGNORED
    return carries / carries.sum().clamp_min(1)


def at_least_one(chosen: np.ndarray, noise: np.ndarray, maskable: np.ndarray) -> np.ndarray:
    """``chosen`` (a masked-LM draw: ``noise`` under the probability, where ``maskable``), or, if it picks
    no token, the maskable token of lowest ``noise``: a group of loss positions is never empty, so no
    update is logged with a loss of 0 it never computed (nor steps on no loss). A draw that picks any token
    is left as it is; one that picks none has probability (1 − p)^n, 10^-7 for 100 tokens at p = 0.15."""
    if chosen.any() or not maskable.any():
        return chosen
    picked = chosen.copy()
    picked.flat[np.argmin(np.where(maskable, noise, np.inf))] = True
    return picked


def corrupt(originals: np.ndarray, mask_id: int, action: np.ndarray, random_ids: np.ndarray) -> np.ndarray:
    """BERT's corruption of chosen tokens: ``action`` < 0.8 → [MASK], < 0.9 → ``random_ids``, else kept."""
    return np.where(action < 0.8, mask_id, np.where(action < 0.9, random_ids, originals))


def generator(seed: int, stream: int, index: int) -> torch.Generator:
    """An independent random stream for (seed, purpose, index)."""
    digest = hashlib.sha256(f"{seed}/{stream}/{index}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


def bucket(n: int) -> int:
    """``n`` rounded up to a multiple of 2^(⌊log₂ n⌋ − 2): at most 25% more, and few distinct sizes (each
    new shape costs a compilation and a CUDA graph)."""
    step = 1 << max(0, n.bit_length() - 3)
    return -(-n // step) * step


def chosen_slots(chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The columns of the True entries of each row of ``chosen`` (B, L), ascending, in
    ``bucket(largest count)`` slots; and which slots hold one (the rest point at column 0)."""
    length = chosen.shape[1]
    columns = torch.arange(length)
    counts = chosen.sum(dim=1, keepdim=True)
    slots = bucket(max(1, int(counts.max())))
    order = torch.where(chosen, columns, length + columns).argsort(dim=1)[:, :slots]
    used = torch.arange(slots) < counts
    return torch.where(used, order, 0), used
