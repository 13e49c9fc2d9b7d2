"""Autoregressive (decoder-only) language models with separate ``q_proj`` / ``k_proj`` projections.

Most families share Llama's layout (``layers.{i}.self_attn.q_proj`` / ``k_proj``, optional biases,
grouped-query attention, ``head_dim`` from the config): Llama 2/3, Mistral, Mixtral, Qwen2, Gemma,
Gemma2, OLMo, MobileLLM, and under other names StarCoder2, Nemotron, GLM, GLM-4, Helium, SmolLM3,
Cohere2, Granite and the MoE models whose attention is Llama's (Qwen2-MoE, PhiMoE, GraniteMoE): their
experts change the feed-forward block only. Phi-3 fuses [q | k | v] into ``qkv_proj``. Families that
normalise q and k are in ``normalised_decoders``.

Position handling per layer comes from the config, not the family: a layer listed as
``sliding_attention`` in ``layer_types`` (or every layer where a bare ``sliding_window`` is set) adds
``sliding_window`` to ``left_out``; a NoPE layer (``no_rope_layers[i] == 0`` in SmolLM3, Cohere2's
global layers) has no position term at all, so ``rotary`` is absent from its ``left_out``.

MobileLLM (``model_type`` "mobilellm", shipped with remote code) is Llama's layout: its config is
read as a ``LlamaConfig`` without running that code (see ``LLAMA_LAYOUT_REMOTE_CODE``). Each stored
block is scored once, also where ``layer_sharing`` runs a block twice.

Jamba is a hybrid: its attention layers are Llama's layout without any position encoding, its other
layers are Mamba blocks, which are not a bilinear form of their input: those yield ``UnscoredLayer``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from .base import (
    Architecture,
    AttentionLayer,
    LayersFn,
    TensorReader,
    UnscoredLayer,
    head_dim_of,
    linear,
    separate_layers,
    separate_qk,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig

LLAMA_LAYOUT_REMOTE_CODE = ("mobilellm",)
"""Remote-code model types whose config.json is read as a LlamaConfig (trust_remote_code stays off)."""

LayerTerms = Callable[["PretrainedConfig", int], tuple[str, ...]]
"""What layer i's form leaves out of the raw score, besides the biases."""


def heads_of(config: PretrainedConfig) -> tuple[int, int, int]:
    """Query heads, kv heads and head width of a Llama-style config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return heads, kv_heads, head_dim_of(config, heads)


def window(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """``sliding_window`` (or Llama 4's ``chunked_attention``) where layer i attends to a local span only."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        local = {"sliding_attention": "sliding_window", "chunked_attention": "chunked_attention"}
        kind = layer_types[i] if i < len(layer_types) else None
        return (local[kind],) if kind in local else ()
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return ("sliding_window",)
    return ()


def uses_rope(config: PretrainedConfig, i: int) -> bool:
    """False for a NoPE layer: ``no_rope_layers[i] == 0`` (SmolLM3, Llama 4; 1 means rotary)."""
    no_rope_layers = getattr(config, "no_rope_layers", None)
    return bool(no_rope_layers[i]) if no_rope_layers and i < len(no_rope_layers) else True


def rotary_terms(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """Rotary (unless a NoPE layer), the 1/√d_h scale, and a local window where the config sets one."""
    return (("rotary",) if uses_rope(config, i) else ()) + ("scale",) + window(config, i)


def llama_layers(
    config: PretrainedConfig, reader: TensorReader, terms: LayerTerms = rotary_terms, prefix: str = ""
) -> Iterator[AttentionLayer]:
    """Separate ``q_proj`` / ``k_proj`` (biases where the checkpoint has them); ``terms`` per layer.

    ``prefix`` locates a language model inside a composite checkpoint (a vision-language model).
    """
    _, kv_heads, head_dim = heads_of(config)
    layers = separate_layers(
        config,
        reader,
        prefix + "layers.{i}.self_attn",
        "q_proj",
        "k_proj",
        stack="decoder",
        left_out=(),
        bias=reader.has(prefix + "layers.0.self_attn.q_proj.bias"),
        n_kv_heads=kv_heads,
        head_dim=head_dim,
    )
    for layer in layers:
        yield replace(layer, left_out=layer.left_out + terms(config, layer.layer))


def _gemma2_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Gemma2 scales by query_pre_attn_scalar^-½ (not head_dim^-½) and may soft-cap the logits."""
    softcap = ("attn_logit_softcapping",) if getattr(config, "attn_logit_softcapping", None) else ()
    return llama_layers(
        config, reader, lambda c, i: ("rotary", "query_pre_attn_scalar") + softcap + window(c, i)
    )


def _olmo_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """OLMo may clamp q, k and v to ±clip_qkv after the projection."""
    clip = ("clip_qkv",) if getattr(config, "clip_qkv", None) is not None else ()
    return llama_layers(config, reader, lambda c, i: rotary_terms(c, i) + clip)


def _granite_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Granite scales q·k by ``attention_multiplier`` instead of 1/√d_h."""
    return llama_layers(config, reader, lambda c, i: ("rotary", "attention_multiplier"))


def _cohere2_terms(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """Cohere2 applies rotary only on its sliding-window layers; the global layers are NoPE."""
    local = window(config, i)
    return ("rotary", "scale") + local if local else ("scale",)


def _cohere2_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return llama_layers(config, reader, _cohere2_terms)


def _phi3_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Phi-3's fused ``qkv_proj``: output rows [q (H·d_h) | k (H_kv·d_h) | v]."""
    heads, kv_heads, head_dim = heads_of(config)
    q_end, k_end = heads * head_dim, (heads + kv_heads) * head_dim
    for i in range(config.num_hidden_layers):
        w_qkv = linear(reader.get(f"layers.{i}.self_attn.qkv_proj.weight"))
        yield AttentionLayer(
            stack="decoder",
            layer=i,
            w_q=w_qkv[:, :q_end],
            w_k=w_qkv[:, q_end:k_end],
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=rotary_terms(config, i),
        )


MAMBA = "Mamba block: a selective state-space scan, not a bilinear form of its input"


def _jamba_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer | UnscoredLayer]:
    """Jamba: attention layers (Llama's layout, no position encoding) among Mamba blocks, in layer order."""
    heads, kv_heads, head_dim = heads_of(config)
    for i, kind in enumerate(config.layers_block_type):
        if kind != "attention":
            yield UnscoredLayer(stack="decoder", layer=i, reason=MAMBA)
            continue
        yield AttentionLayer(
            stack="decoder",
            layer=i,
            **separate_qk(
                reader, f"layers.{i}.self_attn.q_proj", f"layers.{i}.self_attn.k_proj", False, False
            ),
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=("scale",),
        )


def decoder_architecture(
    model_types: tuple[str, ...],
    layers: LayersFn,
    notes: str = "",
    n_layers: Callable[[PretrainedConfig], int] = lambda c: c.num_hidden_layers,
) -> Architecture:
    """A decoder-only language model: one ``decoder`` stack of ``n_layers`` layers."""
    return Architecture(
        model_types=model_types,
        modality="language",
        objective="autoregressive",
        layers=layers,
        n_layers=n_layers,
        notes=notes,
        stacks=("decoder",),
    )


LLAMA = decoder_architecture(
    ("llama", "mistral", "mixtral", "qwen2", "gemma") + LLAMA_LAYOUT_REMOTE_CODE,
    llama_layers,
    "q_proj/k_proj; GQA; head_dim from the config (Gemma MQA)",
)
LLAMA_LAYOUT = decoder_architecture(
    ("starcoder2", "nemotron", "glm", "glm4", "helium", "smollm3"),
    llama_layers,
    "Llama layout; partial rotary, local windows and NoPE layers as the config sets them",
)
LLAMA_LAYOUT_MOE = decoder_architecture(
    ("qwen2_moe", "phimoe"), llama_layers, "MoE feed-forward; attention in Llama's layout"
)
GRANITE = decoder_architecture(
    ("granite", "granitemoe"), _granite_layers, "Llama layout; attention_multiplier replaces 1/√d_h"
)
COHERE2 = decoder_architecture(
    ("cohere2",), _cohere2_layers, "Llama layout; global layers are NoPE, local layers rotary"
)
GEMMA2 = decoder_architecture(
    ("gemma2",), _gemma2_layers, "Llama layout; query_pre_attn_scalar and soft-capping left out"
)
OLMO = decoder_architecture(("olmo",), _olmo_layers, "Llama layout; clip_qkv left out")
PHI3 = decoder_architecture(("phi3",), _phi3_layers, "fused qkv_proj [q|k|v]")
JAMBA = Architecture(
    model_types=("jamba",),
    modality="language",
    objective="autoregressive",
    layers=_jamba_layers,
    n_layers=lambda c: c.num_hidden_layers,
    notes="hybrid: attention layers scored (no position encoding); Mamba layers recorded as not scored",
    stacks=("decoder",),
)

ARCHITECTURES: list[Architecture] = [
    LLAMA,
    LLAMA_LAYOUT,
    LLAMA_LAYOUT_MOE,
    GRANITE,
    COHERE2,
    GEMMA2,
    OLMO,
    PHI3,
    JAMBA,
]
