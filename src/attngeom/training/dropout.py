"""BERT's hidden dropout with a hashed draw per element.

Inside the compiled update, inductor fuses torch's dropout into the residual + LayerNorm kernel that follows
it, and draws there a Philox number per element: on one H200 that kernel took 0.118 ms forward against
0.048 without dropout, at one BERT-base pass's shape (``benchmarks/results/document_blocks_h200/``). Here an
element's 16-bit draw is the top of a keyed integer hash of its place (Wellons' lowbias32 without its last
xorshift, as the block kernels' attention dropout draws), written in int32 torch operations that inductor
fuses into the same kernel (0.067 ms). The key comes from torch's generator, one pair of numbers a call, so
that seeding, checkpointed RNG state and CUDA graphs treat these draws as they treat torch's.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.models.bert.modeling_bert import BertEmbeddings, BertOutput, BertSelfOutput

MULTIPLIERS = (0x7FEB352D, 0x846CA68B - (1 << 32))
"""lowbias32's multipliers, the second as the int32 of the same bits (products wrap modulo 2³²)."""

PLACES = 2**31
"""Elements one call can address (int32 places)."""


def dropout_threshold(dropout: float) -> tuple[int, float]:
    """The 16-bit draw at or above which an element is kept, and the scale of a kept one: dropout with
    probability round(65,536 p) / 65,536 (0.100006 for 0.1), unbiased at that probability."""
    threshold = round(dropout * 65536)
    if dropout and not 0 < threshold < 65536:
        raise ValueError(f"dropout {dropout}: outside what 16-bit draws resolve (1/65,536 to 1 − 1/65,536)")
    return threshold, 1 / (1 - threshold / 65536)


def _mix(h: torch.Tensor) -> torch.Tensor:
    """lowbias32 without its last xorshift, on int32 (the shifts made logical by their masks)."""
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * MULTIPLIERS[0]
    h = h ^ ((h >> 15) & 0x1FFFF)
    return h * MULTIPLIERS[1]


def hashed_dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)`` with the draws of this module's docstring."""
    if not training or p == 0:
        return x
    if x.numel() > PLACES:
        raise ValueError(f"hashed dropout over {x.numel():,} elements: at most {PLACES:,} a call")
    threshold, scale = dropout_threshold(p)
    halves = (torch.rand(2, device=x.device) * 65536).to(torch.int32)
    key = _mix((halves[0] << 16) | halves[1])
    places = torch.arange(x.numel(), device=x.device, dtype=torch.int32).view(x.shape)
    draws = (_mix(places ^ key) >> 16) & 0xFFFF
    return torch.where(draws >= threshold, x * scale, 0.0)


class HashedDropout(nn.Module):
    """``nn.Dropout`` with ``hashed_dropout``'s draws."""

    def __init__(self, p: float):
        super().__init__()
        dropout_threshold(p)  # refused here if 16-bit draws cannot resolve it
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return hashed_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def hash_hidden_dropout(model: PreTrainedModel) -> None:
    """Give the embeddings' and every layer's two hidden dropouts ``hashed_dropout``'s draws (attention's
    dropout is drawn by its attention kernel)."""
    for module in model.modules():
        if isinstance(module, BertEmbeddings | BertSelfOutput | BertOutput):
            module.dropout = HashedDropout(module.dropout.p)
