"""Documents inside packed rows: which document each token belongs to, its position, what it may attend to.

A packed row is [CLS] followed by a slice of the corpus' token stream, in which every document ends with
its [SEP]. With document masking a token attends only to tokens of its own document (and, for a decoder,
only to earlier ones), and positions restart at 0 at each document's first token, so a packed row
computes for each document what a row holding that document alone (plus padding) would compute.
"""

from __future__ import annotations

import torch


def document_ids(rows: torch.Tensor, sep: int) -> torch.Tensor:
    """(B, L) index of each token's document within its row: 0 up to and including the first [SEP], then 1…"""
    ends = (rows == sep).to(torch.int32)
    return (ends.cumsum(dim=1) - ends).to(torch.int32)


def document_positions(documents: torch.Tensor) -> torch.Tensor:
    """(B, L) position of each token within its document (0 at each document's first token)."""
    index = torch.arange(documents.shape[1], device=documents.device).expand_as(documents)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    return index - torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values


def document_attention_mask(documents: torch.Tensor, causal: bool) -> torch.Tensor:
    """(B, 1, L, L) boolean mask for scaled_dot_product_attention: True where query i may attend to key j."""
    same = documents[:, None, :, None] == documents[:, None, None, :]
    if not causal:
        return same
    length = documents.shape[1]
    earlier = torch.ones(length, length, dtype=torch.bool, device=documents.device).tril()
    return same & earlier


def crosses_documents(documents: torch.Tensor, positions: torch.Tensor, offset: int) -> torch.Tensor:
    """Which loss positions predict a token ``offset`` places on that lies in another document
    (a decoder's position i predicts token i + 1): such targets cannot be seen, so they carry no loss."""
    here = documents.gather(1, positions)
    there = documents.gather(1, (positions + offset).clamp_max(documents.shape[1] - 1))
    return here != there
