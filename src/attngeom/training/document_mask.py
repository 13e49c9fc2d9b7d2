"""Documents inside packed rows: which document each token belongs to, its position, what it may attend to.

A packed row is [CLS] followed by a slice of the corpus' token stream, in which every document ends with
its [SEP]. With document masking a token attends only to tokens of its own document (and, for a decoder,
only to earlier ones), and positions restart at 0 at each document's first token, so a packed row
computes for each document what a row holding that document alone (plus padding) would compute.
"""

from __future__ import annotations

import torch

from .batch import bucket


def document_ids(rows: torch.Tensor, sep: int) -> torch.Tensor:
    """(B, L) index of each token's document within its row: 0 up to and including the first [SEP], then 1…"""
    ends = (rows == sep).to(torch.int32)
    return (ends.cumsum(dim=1) - ends).to(torch.int32)


def document_starts(documents: torch.Tensor) -> torch.Tensor:
    """(B, L) where each place's document starts in its row (a document being a run of equal ids)."""
    index = torch.arange(documents.shape[1], device=documents.device).expand_as(documents)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    return torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values


def document_positions(documents: torch.Tensor) -> torch.Tensor:
    """(B, L) position of each token within its document (0 at each document's first token)."""
    return torch.arange(documents.shape[1], device=documents.device) - document_starts(documents)


def document_attention_mask(documents: torch.Tensor, causal: bool) -> torch.Tensor:
    """(B, 1, L, L) boolean mask for scaled_dot_product_attention: True where query i may attend to key j."""
    same = documents[:, None, :, None] == documents[:, None, None, :]
    if not causal:
        return same
    length = documents.shape[1]
    earlier = torch.ones(length, length, dtype=torch.bool, device=documents.device).tril()
    return same & earlier


def document_bounds(documents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) document of every place → where each place's document starts and where it ends (exclusive)
    in its row, int32 (a document being a run of equal ids): the key range a block kernel visits."""
    length = documents.shape[1]
    index = torch.arange(length, device=documents.device).expand_as(documents)
    ends = torch.ones_like(documents, dtype=torch.bool)
    ends[:, :-1] = documents[:, 1:] != documents[:, :-1]
    hi = torch.where(ends, index + 1, length).flip(1).cummin(dim=1).values.flip(1)
    return document_starts(documents).to(torch.int32).contiguous(), hi.to(torch.int32).contiguous()


def crosses_documents(documents: torch.Tensor, positions: torch.Tensor, offset: int) -> torch.Tensor:
    """Which loss positions predict a token ``offset`` places on that lies in another document
    (a decoder's position i predicts token i + 1): such targets cannot be seen, so they carry no loss."""
    here = documents.gather(1, positions)
    there = documents.gather(1, (positions + offset).clamp_max(documents.shape[1] - 1))
    return here != there


def document_segments(documents: torch.Tensor) -> torch.Tensor:
    """Where each document of the flattened rows starts, then their total, as a variable-length attention
    kernel takes them (``cu_seqlens``, int32): a row's documents in order, rows one after another.

    Computed where the micro-batch is built (the count depends on the data); repeated totals (documents of
    no tokens) pad it to ``bucket(count) + 1`` entries, so that the compiled step sees few lengths.
    """
    rows, length = documents.shape
    flat = documents.reshape(-1)
    starts = torch.ones_like(flat, dtype=torch.bool)
    starts[1:] = flat[1:] != flat[:-1]
    starts[::length] = True
    index = starts.nonzero().flatten().to(torch.int32)
    count = bucket(len(index))
    total = torch.full((count + 1 - len(index),), rows * length, dtype=torch.int32)
    return torch.cat([index, total])


def stacked_segments(
    segments: list[torch.Tensor], rows: list[int], padded_rows: int, length: int
) -> torch.Tensor:
    """The segments of runs' micro-batches stacked run after run, each grown from ``rows[r]`` to
    ``padded_rows`` rows (each new row one document, as ``MicroBatch.padded`` fills it): on the device
    the segments are on, without reading them back."""
    device = segments[0].device
    parts = []
    for run, (own, count) in enumerate(zip(segments, rows, strict=True)):
        offset = run * padded_rows * length
        grown = count * length + length * torch.arange(padded_rows - count, device=device, dtype=torch.int32)
        parts += [own[:-1] + offset, grown + offset]
    total = torch.full((1,), len(segments) * padded_rows * length, dtype=torch.int32, device=device)
    return torch.cat([*parts, total])


def row_segments(rows: int, length: int) -> torch.Tensor:
    """The segments of rows that are each one document."""
    return torch.arange(0, rows * length + 1, length, dtype=torch.int32)
