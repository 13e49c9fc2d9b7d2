"""Attention inside each document of packed rows, computed only where the document mask lets a token look.

The dense path (``document_mask.document_attention_mask`` given to SDPA) computes every query × key pair
of a 512-token row and masks most of them away: 256 documents of ~94 tokens packed into such rows keep
~30% of the pairs. The flash kernel's variable-length form takes the rows flattened and the start of
every document (``document_mask.document_segments``) and computes each document's own pairs only, with
attention dropout as SDPA's flash kernel draws it (kept pairs scaled by 1/(1 − p)). For every document it
computes what the dense mask computes; the dropout draws are other draws.

CUDA only, on half-precision inputs (the training step's bf16 autocast), chosen with ``training.attention:
varlen``. Not the default: on an H100 its backward pass over the kept pairs costs what cuDNN's costs over
all pairs of the rows (``benchmarks/document_attention.py``). transformers' BERT reaches it through its
``AttentionInterface`` under ``VARLEN``, given the segments as a keyword its layers pass on.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface

VARLEN = "attngeom_document_varlen"
"""The attention implementation's name in transformers' ``AttentionInterface``."""
BLOCKS = "attngeom_document_blocks"
"""The name of ``document_blocks.py``'s Triton kernels there (registered where that module is imported)."""


def document_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    segments: torch.Tensor,
    dropout: float,
    causal: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """(N, H, L, D) queries, keys and values of N packed rows → (N, L, H, D): each token attends to its own
    document's tokens (and, ``causal``, only to earlier ones); ``segments``: the flattened rows' document
    starts and their total, ``document_segments`` of the rows' documents."""
    rows, heads, length, dim = query.shape

    def flat(t: torch.Tensor) -> torch.Tensor:
        return t.transpose(1, 2).reshape(rows * length, heads, dim)

    out = torch.ops.aten._flash_attention_forward(
        flat(query),
        flat(key),
        flat(value),
        segments,
        segments,
        length,
        length,
        dropout,
        causal,
        False,
        scale=scale,
    )[0]
    return out.view(rows, length, heads, dim)


def transformers_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    segments: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; the document segments come as the keyword ``segments``
    that the model's call passes down to its layers."""
    if segments is None or attention_mask is not None:
        raise ValueError(
            f"attention {VARLEN} takes the rows' document segments (segments=document_segments(...)) "
            "and no attention mask: call the model through attngeom.training.model.hidden_states"
        )
    return document_attention(query, key, value, segments, dropout, module.is_causal, scaling), None


AttentionInterface.register(VARLEN, transformers_attention)
