"""GPT-lineage decoders: GPT-1, GPT-2, GPT-Neo, GPT-J, GPT-NeoX/Pythia, BLOOM, Falcon, OPT, and the fused-qkv
code and chat models after them: GPTBigCode (SantaCoder, StarCoder 1), MPT, DBRX.

Most of them fuse q, k and v into one projection; each is sliced here exactly as the model's own
forward pass splits it (checked against that forward pass in tests/test_arch_gpt_lineage.py):

- GPT-1 / GPT-2 ``c_attn`` (a ``Conv1D``, already in the x W convention): columns [q | k | v].
- GPT-NeoX, BLOOM, classic Falcon ``query_key_value`` (an ``nn.Linear``): rows per head [q_h k_h v_h].
- Falcon's new decoder architecture: rows per kv group [q_g,0 … q_g,G-1 k_g v_g], G = H / H_kv.
- Falcon multi-query: rows [q_0 … q_H-1 | k | v], one key head shared by all query heads.
- GPTBigCode ``c_attn`` (an ``nn.Linear``): multi-query rows [q (H·d_h) | k (d_h) | v (d_h)], or rows per
  head [q_h k_h v_h] without ``multi_query``.
- MPT ``Wqkv``: rows [q | k | v]; DBRX ``Wqkv``: rows [q (H·d_h) | k (H_kv·d_h) | v (H_kv·d_h)].
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from ..base import (
    Architecture,
    ArchitectureError,
    AttentionLayer,
    TensorReader,
    fused_layers,
)
from .decoders import decoder_architecture

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_FUSED_OUTSIDE = (
    "fused q/k/v rows split outside transformers' attention interface: the conformance cannot confirm"
    " discovery's split (refused)"
)


STACK = "decoder"


def _grouped_rows(fused: torch.Tensor, groups: int, queries_per_group: int, head_dim: int):
    """(q rows, k rows) of a fused weight (or bias) laid out as ``groups`` × [q × queries_per_group, k, v]."""
    blocks = fused.unflatten(0, (groups, queries_per_group + 2, head_dim))
    return blocks[:, :queries_per_group].flatten(0, 2), blocks[:, queries_per_group].flatten(0, 1)


def _bloom_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    yield from fused_layers(
        reader,
        "h.{i}.self_attention.query_key_value",
        config.num_hidden_layers,
        heads,
        head_dim,
        True,
        ("scale", "alibi"),
        split=lambda fused: _grouped_rows(fused, heads, 1, head_dim),
        stack=STACK,
    )


def _falcon_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """All three Falcon layouts of the fused ``query_key_value`` (see the module docstring)."""
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    name = "h.{i}.self_attention.query_key_value"
    left_out = ("alibi" if config.alibi else "rotary", "scale")
    if config.new_decoder_architecture:
        kv_heads = config.num_kv_heads
    else:
        kv_heads = 1 if config.multi_query else heads

    def split(fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if config.multi_query and not config.new_decoder_architecture:
            return fused[: heads * head_dim], fused[heads * head_dim : (heads + 1) * head_dim]
        return _grouped_rows(fused, kv_heads, heads // kv_heads, head_dim)  # classic: groups of one head

    yield from fused_layers(
        reader,
        name,
        config.num_hidden_layers,
        heads,
        head_dim,
        config.bias,
        left_out,
        kv_heads,
        split,
        stack=STACK,
    )


def _gpt_bigcode_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """GPTBigCode: multi-query ``c_attn`` rows [q | k | v] (one kv head), or rows per head [q_h k_h v_h]."""
    if getattr(config, "add_cross_attention", False):
        raise ArchitectureError(
            "gpt_bigcode with add_cross_attention=True (an encoder-decoder's decoder) is not supported; "
            "score the decoder-only model"
        )
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    kv_heads = 1 if config.multi_query else heads

    def split(fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if config.multi_query:
            return fused[: heads * head_dim], fused[heads * head_dim : (heads + 1) * head_dim]
        return _grouped_rows(fused, heads, 1, head_dim)

    scale = ("scale",) if config.scale_attn_weights else ()
    yield from fused_layers(
        reader,
        "h.{i}.attn.c_attn",
        config.num_hidden_layers,
        heads,
        head_dim,
        True,
        scale + ("absolute_position_embeddings",),
        kv_heads,
        split,
        stack=STACK,
    )


def _mpt_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """MPT: ``Wqkv`` rows [q | k | v], no biases by default; ALiBi; optional clip_qkv and softmax_scale."""
    attn = config.attn_config
    if attn.qk_ln:
        raise ArchitectureError(
            "mpt with attn_config.qk_ln=True: transformers' MPT has no q/k LayerNorm, so the model it runs "
            "is not this checkpoint's; such checkpoints are not supported"
        )
    heads = config.n_heads
    has_bias = reader.has("blocks.0.attn.Wqkv.bias")
    left_out = ("alibi", "softmax_scale" if attn.softmax_scale else "scale")
    left_out += ("clip_qkv",) if attn.clip_qkv else ()
    yield from fused_layers(
        reader,
        "blocks.{i}.attn.Wqkv",
        config.n_layers,
        heads,
        config.d_model // heads,
        has_bias,
        left_out,
        stack=STACK,
    )


def _dbrx_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """DBRX: ``Wqkv`` rows [q (H·d_h) | k (H_kv·d_h) | v], no biases; rotary; q, k, v clamped to ±clip_qkv."""
    heads, kv_heads = config.n_heads, config.attn_config.kv_n_heads
    head_dim = config.d_model // heads
    clip = ("clip_qkv",) if config.attn_config.clip_qkv is not None else ()

    def split(fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q_end = heads * head_dim
        return fused[:q_end], fused[q_end : q_end + kv_heads * head_dim]

    yield from fused_layers(
        reader,
        "blocks.{i}.norm_attn_norm.attn.Wqkv",
        config.n_layers,
        heads,
        head_dim,
        False,
        ("rotary", "scale") + clip,
        kv_heads,
        split,
        stack=STACK,
    )


ARCHITECTURES: list[Architecture] = [
    decoder_architecture(
        ("bloom",), _bloom_layers, "BLOOM: fused rows per head [q_h k_h v_h]; ALiBi", why=_FUSED_OUTSIDE
    ),
    decoder_architecture(
        ("falcon",),
        _falcon_layers,
        "Falcon: per-head, per-kv-group (new arch) or multi-query fused rows",
        why=_FUSED_OUTSIDE + "; three fused layouts set by its config",
    ),
    decoder_architecture(
        ("gpt_bigcode",),
        _gpt_bigcode_layers,
        "SantaCoder, StarCoder 1: nn.Linear c_attn, multi-query rows [q | k | v] or per head",
        why=(
            "its fused c_attn layout is set by the config (multi_query: [q | k | v], else per head): "
            "discovery reads the one layout of the tiny model"
        ),
    ),
    decoder_architecture(
        ("mpt",),
        _mpt_layers,
        "MPT: Wqkv rows [q | k | v]; ALiBi",
        lambda c: c.n_layers,
        why="attn_config.qk_ln checkpoints hold q/k LayerNorms that transformers' MPT never runs: refused",
    ),
    decoder_architecture(
        ("dbrx",),
        _dbrx_layers,
        "DBRX: Wqkv rows [q | k | v] with GQA; clip_qkv",
        lambda c: c.n_layers,
        why="transformers' default config does not build its model: discovery has no tiny model",
    ),
]
