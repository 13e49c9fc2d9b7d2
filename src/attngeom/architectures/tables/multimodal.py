"""Vision-language models discovery does not score: LLaVA, LLaVA-NeXT, BLIP, BLIP-2, GIT, Llama 3.2 Vision.

A composite scores every tower with the registry's map for the tower's own ``model_type`` (see
``composite``), so the tower a checkpoint holds is read whatever the tiny model's was: the language model
of a LLaVA is scored exactly as the same Llama, Mistral or Qwen2 checkpoint would be, under stack ``text``.
The connector (projector, pixel shuffle) has no attention.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from ..base import Architecture, AttentionLayer, TensorReader, linear
from .composite import Tower, composite
from .vision import qk_block

if TYPE_CHECKING:
    from transformers import PretrainedConfig

_TOWER_UNSEEN = (
    "a checkpoint's tower may be another model_type than the tiny model's (a Pixtral vision tower, an"
    " OPT or T5 language model): discovery validates only the tiny model's towers"
)


LANGUAGE_MODEL = ("language_model.model.", "language_model.")
"""On disk transformers saves ``language_model.model.layers``; in memory ``model.language_model.layers``."""
LLAVA_TOWERS = (
    Tower("vision", "vision_config", ("vision_tower.",), "vision"),
    Tower("text", "text_config", LANGUAGE_MODEL, "language"),
)
BLIP_TEXT_PROBE = "encoder.layer.0.attention.self.query.weight"
BLIP_TOWERS = (
    Tower("vision", "vision_config", ("vision_model.",), "vision"),
    Tower("text", "text_config", ("text_model.",), "language", probe=BLIP_TEXT_PROBE),
    Tower("text_encoder", "text_config", ("text_encoder.",), "language", probe=BLIP_TEXT_PROBE),
    Tower("text_decoder", "text_config", ("text_decoder.bert.",), "language", probe=BLIP_TEXT_PROBE),
)
BLIP2_TOWERS = (
    Tower("vision", "vision_config", ("vision_model.",), "vision"),
    Tower("qformer", "qformer_config", ("qformer.",), "multimodal"),
    Tower("text", "text_config", LANGUAGE_MODEL, "language"),
)


def _git_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """GIT: a CLIP image encoder (stack ``vision``) and a BERT-style text decoder (stack ``decoder``) whose
    self-attention runs over [image tokens; text tokens], causal on the text."""
    vision = config.vision_config
    heads = vision.num_attention_heads
    for i in range(vision.num_hidden_layers):
        base = f"image_encoder.vision_model.encoder.layers.{i}.self_attn"
        yield qk_block(
            reader, "vision", i, (f"{base}.q_proj",), (f"{base}.k_proj",), heads, vision.hidden_size // heads
        )
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        base = f"encoder.layer.{i}.attention.self"
        yield qk_block(
            reader, "decoder", i, (f"{base}.query",), (f"{base}.key",), heads, config.hidden_size // heads
        )


QK_NORM_CROSS_FORM = (
    "qk_norm per head cross: W_q,h diag(g_q ⊙ g_k) W_k,hᵀ between text and image states, "
    "up to per-token-and-head scalars"
)


def _mllama_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Llama 3.2 Vision: the vision encoder (local then global layers, one ``vision`` stack), the text
    decoder's self-attention (``decoder``: grouped-query, rotary) and its cross-attention layers to the
    projected image features (``cross``), whose q and k are RMS-normalised per head: the gains are
    folded into W_q, the per-token-and-head 1/rms scalars are outside the form.
    """
    vision = config.vision_config
    heads = vision.attention_heads
    local = [f"vision_model.transformer.layers.{i}" for i in range(vision.num_hidden_layers)]
    global_ = [f"vision_model.global_transformer.layers.{i}" for i in range(vision.num_global_layers)]
    for index, base in enumerate(local + global_):
        yield AttentionLayer(
            stack="vision",
            layer=index,
            w_q=linear(reader.get(f"{base}.self_attn.q_proj.weight")),
            w_k=linear(reader.get(f"{base}.self_attn.k_proj.weight")),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=vision.hidden_size // heads,
            left_out=("scale",),
        )
    text = config.text_config
    heads, kv_heads = text.num_attention_heads, text.num_key_value_heads
    head_dim = text.hidden_size // heads
    cross_layers = set(text.cross_attention_layers)

    def get(i: int, name: str) -> torch.Tensor:  # on disk under language_model.model., in memory without
        return reader.get(f"language_model.model.layers.{i}.{name}", f"language_model.layers.{i}.{name}")

    for i in range(text.num_hidden_layers):
        if i in cross_layers:
            continue
        yield AttentionLayer(
            stack="decoder",
            layer=i,
            w_q=linear(get(i, "self_attn.q_proj.weight")),
            w_k=linear(get(i, "self_attn.k_proj.weight")),
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=("rotary", "scale"),
        )
    for i in sorted(cross_layers):
        gains = get(i, "cross_attn.q_norm.weight") * get(i, "cross_attn.k_norm.weight")
        yield AttentionLayer(
            stack="cross",
            layer=i,
            w_q=linear(get(i, "cross_attn.q_proj.weight")) * gains.repeat(heads),
            w_k=linear(get(i, "cross_attn.k_proj.weight")),
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=("qk_norm_scalars", "scale"),
            form=QK_NORM_CROSS_FORM,
            cross=True,
        )


ARCHITECTURES: list[Architecture] = [
    composite(
        ("llava", "llava_next"),
        LLAVA_TOWERS,
        objective="autoregressive",
        objective_from="text",
        notes="vision tower (CLIP, SigLIP, Pixtral) + any mapped language model",
        why=_TOWER_UNSEEN,
    ),
    composite(
        ("blip",),
        BLIP_TOWERS,
        objective="bidirectional",
        cross_modality={
            "text_cross": "multimodal",
            "text_encoder_cross": "multimodal",
            "text_decoder_cross": "multimodal",
        },
        notes="text towers as the checkpoint holds them (text_model, text_encoder, text_decoder); "
        "captioning's text_decoder is causal",
        why=(
            "its checkpoint classes hold their text towers under other names (text_encoder, "
            "text_decoder.bert) than the tiny base model: discovery misses them or fails"
        ),
    ),
    composite(
        ("blip-2",),
        BLIP2_TOWERS,
        objective="autoregressive",
        objective_from="text",
        cross_modality={"qformer_cross": "multimodal"},
        notes="OPT or T5 language model (T5: text is its encoder, text_decoder, text_cross)",
        why=_TOWER_UNSEEN,
    ),
    Architecture(
        model_types=("git",),
        modality="multimodal",
        objective="autoregressive",
        layers=_git_layers,
        n_layers=lambda c: c.num_hidden_layers + c.vision_config.num_hidden_layers,
        stacks=("vision", "decoder"),
        stack_modality={"vision": "vision"},
        why=(
            "its decoder attends to the image tokens both ways and to the text causally: discovery reads the "
            "tiny model's mask as bidirectional and its modality as vision"
        ),
    ),
    Architecture(
        model_types=("mllama",),
        modality="multimodal",
        objective="autoregressive",
        layers=_mllama_layers,
        n_layers=lambda c: (
            c.vision_config.num_hidden_layers
            + c.vision_config.num_global_layers
            + c.text_config.num_hidden_layers
        ),
        stacks=("vision", "decoder", "cross"),
        stack_modality={"vision": "vision", "decoder": "language"},
        notes="Llama 3.2 Vision; cross-attention q/k RMS-normalised per head (gains folded into W_q)",
        why=(
            "its vision encoder's local and global layers are one stack (the paper's Llama-3.2-11B-Vision): "
            "discovery names a stack per module path and splits them"
        ),
    ),
]
