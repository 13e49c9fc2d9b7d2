"""Swin stages of growing width: Swin v2's scaled cosine attention, and the Swin blocks of Mask2Former's
backbone and CLAP's audio encoder (HTS-AT).

Layers are numbered across stages; each layer row carries its own width and head count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from ..base import AttentionLayer, TensorReader
from .vision import qk_block, vision_architecture

if TYPE_CHECKING:
    from transformers import PretrainedConfig

COSINE_FORM = (
    "cosine: W_q,h W_k,hᵀ up to per-token, per-head normalisation of q and k (scaled cosine attention)"
)


def swin_stages(
    reader: TensorReader,
    root: str,
    widths: Sequence[int],
    depths: Sequence[int],
    heads: Sequence[int],
    *,
    stack: str = "encoder",
    v2: bool = False,
) -> Iterator[AttentionLayer]:
    """Swin blocks ``{root}.layers.{stage}.blocks.{block}.attention`` (``self.query`` on disk, ``q_proj``
    in memory since transformers 5).

    Windowed attention applies the same W_q, W_k to every window; the relative position bias is outside
    the form. Swin v2 normalises q and k per head (scaled cosine attention): its form is W_q,h W_k,hᵀ up
    to per-token, per-head scalars, and its key has no bias.
    """
    index = 0
    for stage, (width, depth, n_heads) in enumerate(zip(widths, depths, heads, strict=True)):
        for block in range(depth):
            base = f"{root}.layers.{stage}.blocks.{block}.attention"
            yield qk_block(
                reader,
                stack,
                index,
                (f"{base}.self.query", f"{base}.q_proj"),
                (f"{base}.self.key", f"{base}.k_proj"),
                n_heads,
                width // n_heads,
                k_bias=not v2,
                left_out=("bias", "relative_position") + (() if v2 else ("scale",)),
                form=COSINE_FORM if v2 else "standard",
            )
            index += 1


def swin_layers(
    config: PretrainedConfig, reader: TensorReader, stack: str = "encoder"
) -> Iterator[AttentionLayer]:
    """Swin / Swin v2: stage s has width embed_dim·2^s and its own head count."""
    widths = [config.embed_dim * 2**stage for stage in range(len(config.depths))]
    return swin_stages(
        reader,
        "encoder",
        widths,
        config.depths,
        config.num_heads,
        stack=stack,
        v2=config.model_type == "swinv2",
    )


ARCHITECTURES = [
    vision_architecture(
        ("swinv2",),
        swin_layers,
        n_layers=lambda c: sum(c.depths),
        notes="scaled cosine attention",
        why=(
            "scaled cosine attention (q, k L2-normalised per head in the forward): discovery would call the "
            "form standard"
        ),
    ),
]
