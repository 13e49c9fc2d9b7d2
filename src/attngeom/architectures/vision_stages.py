"""Hierarchical vision encoders: stages of growing width (Swin, SegFormer, MobileViT, CLAP's HTS-AT).

Layers are numbered across stages; each layer row carries its own width and head count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from .base import AttentionLayer, TensorReader
from .vision import qk_block, vision_architecture

if TYPE_CHECKING:
    from transformers import PretrainedConfig

COSINE_FORM = (
    "cosine: W_q,h W_k,hᵀ up to per-token, per-head normalisation of q and k (scaled cosine attention)"
)
REDUCED_CROSS_FORM = "spatial_reduction cross: x W_q W_kᵀ yᵀ, y = LayerNorm(strided conv(x)) the reduced key sequence (two spaces)"


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


def _segformer_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """SegFormer (Mix Transformer): stage s has width ``hidden_sizes[s]``, its own heads and a sequence
    reduction ratio. With ratio > 1 the keys read y = LayerNorm(conv_{r×r, stride r}(x)), a shorter
    sequence in another basis: the form maps x's space against y's, so it is scored as a cross form
    (stack ``cross_reduced``, symmetry null). Stages with ratio 1 are standard self-attention.
    """
    index = 0
    for stage, depth in enumerate(config.depths):
        heads, width = config.num_attention_heads[stage], config.hidden_sizes[stage]
        reduced = config.sr_ratios[stage] > 1
        for block in range(depth):
            disk, memory = (
                f"encoder.block.{stage}.{block}.attention.self",
                f"stages.{stage}.blocks.{block}.attention",
            )
            yield qk_block(
                reader,
                "cross_reduced" if reduced else "encoder",
                index,
                (f"{disk}.query", f"{memory}.q_proj"),
                (f"{disk}.key", f"{memory}.k_proj"),
                heads,
                width // heads,
                left_out=("bias", "scale"),
                form=REDUCED_CROSS_FORM if reduced else "standard",
                cross=reduced,
            )
            index += 1


MOBILEVIT_DEPTHS = (2, 4, 3)
"""Transformer layers of MobileViT's three attention stages: fixed by the architecture, not in the config."""


def _mobilevit_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """MobileViT: stages 2–4 (``encoder.layer.{2,3,4}``) unfold the feature map into patches and run
    standard self-attention among the pixels at the same offset of every patch (width ``hidden_sizes[s]``).
    """
    heads = config.num_attention_heads
    index = 0
    for stage, (depth, width) in enumerate(zip(MOBILEVIT_DEPTHS, config.hidden_sizes, strict=True)):
        for block in range(depth):
            base = f"encoder.layer.{stage + 2}.transformer.layer.{block}.attention.attention"
            yield qk_block(
                reader,
                "encoder",
                index,
                (f"{base}.query",),
                (f"{base}.key",),
                heads,
                width // heads,
                left_out=("bias", "scale"),
            )
            index += 1


ARCHITECTURES = [
    vision_architecture(("swin", "swinv2"), swin_layers, n_layers=lambda c: sum(c.depths)),
    vision_architecture(
        ("segformer",),
        _segformer_layers,
        n_layers=lambda c: sum(c.depths),
        stacks=("cross_reduced", "encoder"),
        notes="spatial-reduction attention (keys from a strided conv + LayerNorm) is a cross form",
    ),
    vision_architecture(
        ("mobilevit",),
        _mobilevit_layers,
        n_layers=lambda c: sum(MOBILEVIT_DEPTHS),
        notes="attention among pixels at the same offset of every patch",
    ),
]
