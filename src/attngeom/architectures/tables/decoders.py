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

from ..base import (
    Architecture,
    AttentionLayer,
    LayersFn,
    TensorReader,
    head_dim_of,
    separate_layers,
)
from ..positions import rotary_terms, window

if TYPE_CHECKING:
    from transformers import PretrainedConfig

READ_AS_WRITTEN = (
    "config.json read as written, without importing transformers (sources.config.READ_AS_WRITTEN): "
    "discovery needs transformers' model classes"
)
NOPE_BY_CODE = (
    "its global layers are NoPE by its modeling code, not by its config: discovery would list rotary there"
)


LLAMA_LAYOUT_REMOTE_CODE = ("mobilellm",)
"""Remote-code model types whose config.json is read as a LlamaConfig (trust_remote_code stays off)."""

LayerTerms = Callable[["PretrainedConfig", int], tuple[str, ...]]
"""What layer i's form leaves out of the raw score, besides the biases."""


def heads_of(config: PretrainedConfig) -> tuple[int, int, int]:
    """Query heads, kv heads and head width of a Llama-style config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return heads, kv_heads, head_dim_of(config, heads)


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


def _cohere2_terms(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """Cohere2 applies rotary only on its sliding-window layers; the global layers are NoPE."""
    local = window(config, i)
    return ("rotary", "scale") + local if local else ("scale",)


def _cohere2_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return llama_layers(config, reader, _cohere2_terms)


def decoder_architecture(
    model_types: tuple[str, ...],
    layers: LayersFn,
    notes: str = "",
    n_layers: Callable[[PretrainedConfig], int] = lambda c: c.num_hidden_layers,
    *,
    why: str,
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
        why=why,
    )


LLAMA_NOTES = "q_proj/k_proj; GQA; head_dim from the config (Gemma MQA)"
LLAMA = decoder_architecture(
    ("llama", "mistral", "mixtral", "gemma"), llama_layers, LLAMA_NOTES, why=READ_AS_WRITTEN
)
MOBILELLM = decoder_architecture(
    LLAMA_LAYOUT_REMOTE_CODE,
    llama_layers,
    LLAMA_NOTES,
    why="remote code: its config.json is read as Llama's without transformers or its code",
)
COHERE2 = decoder_architecture(
    ("cohere2",),
    _cohere2_layers,
    "Llama layout; global layers are NoPE, local layers rotary",
    why=NOPE_BY_CODE,
)


ARCHITECTURES: list[Architecture] = [LLAMA, MOBILELLM, COHERE2]
