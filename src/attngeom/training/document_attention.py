"""BERT's attention through FlexAttention with a document block mask: work only where a token may attend.

``training.attention=flex`` registers ``document_flex_attention`` with transformers' ``AttentionInterface``
under ``FLEX``, so ``BertSelfAttention`` calls it as it calls SDPA, given the ``BlockMask`` of the micro-batch
(``document_block_mask``, built once per forward pass from the ``documents`` tensor) as its attention mask.
Blocks of query × key pairs that the document mask removes (most of them, for short packed documents) are
never computed.

FlexAttention has no dropout; BERT's attention dropout (``attention_probs_dropout_prob``, 0.1 in the
paper's and the authors' recipes) is kept exactly, as SDPA computes it: out_i = Σ_j m_ij softmax(s)_ij v_j /
(1 − p) with m_ij ~ Bernoulli(1 − p) for every batch, head, query and key. A score modification can only
drop a pair from both the softmax's numerator and its denominator, so the keys are given twice: in the first
copy, whose values are v / (1 − p), the pairs kept; in the second, whose values are 0, the pairs dropped.
The softmax's denominator then counts every pair, its numerator only the kept ones. That doubles the key
blocks computed (still only those the document mask keeps); without dropout (p = 0, or evaluation) the keys
are given once. The draws m_ij come from a counter-based hash of (seed, b, h, i, j), a fresh seed per call
from torch's generator, so the backward pass sees the same draws; they are other draws than SDPA's.

On the CPU torch's FlexAttention front end refuses gradients; there its operator is called directly, which
computes the same mathematics densely (the CPU tests use it against the dense-mask SDPA path).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention
from transformers import AttentionInterface

FLEX = "attngeom_document_flex"
"""The attention implementation's name in transformers' ``AttentionInterface``."""
LOW16, LOW32 = 0xFFFF, 0xFFFFFFFF


def document_block_mask(documents: torch.Tensor, causal: bool, doubled: bool) -> BlockMask:
    """The ``BlockMask`` of ``document_attention_mask`` for (B, L) ``documents``: query i sees key j of its
    own document (and j ≤ i for a decoder); ``doubled``: over 2L keys, the L keys given twice (dropout)."""
    rows, length = documents.shape

    def same_document(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        key = kv % length
        same = documents[b, q] == documents[b, key]
        return same & (key <= q) if causal else same

    keys = 2 * length if doubled else length
    return create_block_mask(same_document, rows, None, length, keys, device=documents.device)


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """x · constant mod 2³² for 32-bit x in int64, in two 16-bit halves so that no product overflows."""
    low = (x & LOW16) * constant
    high = (((x >> 16) * constant) & LOW16) << 16
    return (low + high) & LOW32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """Chris Wellons' ``lowbias32``: a bijection of 32-bit integers whose output bits look independent."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def dropped(
    seed: torch.Tensor,
    b: torch.Tensor,
    h: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    heads: int,
    length: int,
    p: float,
) -> torch.Tensor:
    """Whether attention dropout drops pair (q, k) of head h in row b: uniform 32-bit draws below p · 2³²."""
    counter = ((b.to(torch.int64) * heads + h) * length + q) * length + k
    x = hash32((counter & LOW32) ^ (seed & LOW32))
    x = hash32(x ^ (counter >> 32) ^ (seed >> 32))
    return x < int(p * 2**32)


def _dropout_score_mod(seed: torch.Tensor, heads: int, length: int, p: float) -> Callable:
    """Over the doubled keys: the first copy keeps the pairs not dropped, the second the dropped ones."""

    def score_mod(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
    ) -> torch.Tensor:
        first = kv < length
        drop = dropped(seed, b, h, q, kv % length, heads, length, p)
        return torch.where(first == drop, -float("inf"), score)

    return score_mod


_compiled_flex = None


def _flex(query, key, value, score_mod, block_mask: BlockMask, scale: float | None) -> torch.Tensor:
    """FlexAttention: inside a compiled graph as it is; on a GPU otherwise compiled once; on the CPU,
    torch's operator itself (its front end refuses gradients there), which computes the same densely."""
    global _compiled_flex
    if torch.compiler.is_compiling():
        return flex_attention(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale)
    if query.device.type == "cpu":
        from torch._higher_order_ops.flex_attention import flex_attention as flex_operator
        from torch.nn.attention.flex_attention import _apply_kernel_options

        options = _apply_kernel_options(query, key, value, False, None, None)
        mod = score_mod or _identity
        scale = query.shape[-1] ** -0.5 if scale is None else scale
        return flex_operator(query, key, value, mod, block_mask.as_tuple(), scale, options)[0]
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention)
    return _compiled_flex(query, key, value, score_mod=score_mod, block_mask=block_mask, scale=scale)


def _identity(
    score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
) -> torch.Tensor:
    return score


def document_flex_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: BlockMask,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: (B, H, L, D) q, k, v → ((B, L, H, D) output, None)."""
    if not isinstance(attention_mask, BlockMask):
        raise TypeError(
            f"{FLEX} attention needs the BlockMask of document_block_mask, not {type(attention_mask)}"
        )
    rows, heads, length, _ = query.shape
    if attention_mask.shape[-1] != (2 * length if dropout > 0 else length):
        raise ValueError(
            f"{FLEX}: a block mask over {attention_mask.shape[-1]} keys for {length} tokens with dropout "
            f"{dropout}: build it with doubled={dropout > 0}"
        )
    if dropout > 0:
        seed = torch.randint(2**62, (), device=query.device)
        key = torch.cat([key, key], dim=2)
        value = torch.cat([value / (1 - dropout), torch.zeros_like(value)], dim=2)
        score_mod = _dropout_score_mod(seed, heads, length, dropout)
    else:
        score_mod = None
    out = _flex(query, key, value, score_mod, attention_mask, scaling)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(FLEX, document_flex_attention)
