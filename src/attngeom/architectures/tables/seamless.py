"""SeamlessM4T: text and speech in, text and speech units out; every attention stack scored on its own.

Stacks (each held only by the classes that use it; the tensor names say which a checkpoint holds):

- ``text_encoder`` (language) and ``speech_encoder`` (audio: a Conformer whose score adds a relative
  position term; the content term's query carries the learned bias ``pos_bias_u``, scored as b_q),
  ``speech_adapter`` (audio: self-attention over the convolution-pooled speech states);
- ``decoder`` (language) and its ``cross`` attention to whichever encoder ran;
- ``t2u_encoder``, ``t2u_decoder`` and ``t2u_cross``: the text-to-unit model that turns the text
  decoder's states into discrete speech units (its decoder is audio).

The vocoder (HiFi-GAN) has no attention. ``SeamlessM4TForTextToText`` holds the text encoder and the
decoder, ``…ForSpeechToText`` the speech encoder and the decoder, ``…ToSpeech`` adds the text-to-unit
model, ``SeamlessM4TModel`` everything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from ..base import Architecture, AttentionLayer, TensorReader
from .seq2seq import CROSS_FORM, Projections, Stack, stack_layer

if TYPE_CHECKING:
    from transformers import PretrainedConfig

BART_LEFT_OUT = ("bias", "scale", "absolute_position_embeddings")
CONFORMER = Projections("speech_encoder.encoder.layers.{i}.self_attn", q="linear_q", k="linear_k")
SPEECH_IN = ("speech_encoder", "speech_adapter")
TEXT_OUT = ("decoder", "cross")
SPEECH_OUT = ("t2u_encoder", "t2u_decoder", "t2u_cross")


def _stacks(config: PretrainedConfig) -> list[Stack]:
    d = config.hidden_size

    def stack(name: str, prefix: str, layers: int, heads: int, form: str = "standard") -> Stack:
        return Stack(name, Projections(prefix, left_out=BART_LEFT_OUT, form=form), layers, heads, d // heads)

    enc_heads, dec_heads = config.encoder_attention_heads, config.decoder_attention_heads
    t2u_enc, t2u_dec = config.t2u_encoder_attention_heads, config.t2u_decoder_attention_heads
    speech_heads = config.speech_encoder_attention_heads
    positions = {"relative": ("relative_position",), "rotary": ("rotary",)}.get(
        config.position_embeddings_type, ()
    )
    conformer = replace(CONFORMER, left_out=("bias", "scale") + positions)
    adapter = replace(
        conformer, prefix="speech_encoder.adapter.layers.{i}.self_attn", left_out=("bias", "scale")
    )
    return [
        stack("text_encoder", "text_encoder.layers.{i}.self_attn", config.encoder_layers, enc_heads),
        Stack("speech_encoder", conformer, config.speech_encoder_layers, speech_heads, d // speech_heads),
        Stack(
            "speech_adapter",
            adapter,
            config.num_adapter_layers if config.add_adapter else 0,
            speech_heads,
            d // speech_heads,
        ),
        stack("decoder", "text_decoder.layers.{i}.self_attn", config.decoder_layers, dec_heads),
        stack(
            "cross", "text_decoder.layers.{i}.cross_attention", config.decoder_layers, dec_heads, CROSS_FORM
        ),
        stack(
            "t2u_encoder", "t2u_model.model.encoder.layers.{i}.self_attn", config.t2u_encoder_layers, t2u_enc
        ),
        stack(
            "t2u_decoder", "t2u_model.model.decoder.layers.{i}.self_attn", config.t2u_decoder_layers, t2u_dec
        ),
        stack(
            "t2u_cross",
            "t2u_model.model.decoder.layers.{i}.cross_attention",
            config.t2u_decoder_layers,
            t2u_dec,
            CROSS_FORM,
        ),
    ]


def _seamless_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Every stack whose first query projection the checkpoint holds, in the order of ``_stacks``."""
    stacks = [stack for stack in _stacks(config) if stack.n_layers]
    held = [
        stack for stack in stacks if reader.has(stack.first_query)
    ] or stacks  # none: name what is missing
    for stack in held:
        for i in range(stack.n_layers):
            layer = stack_layer(reader, stack, i)
            if stack.name == "speech_encoder" and config.position_embeddings_type == "relative":
                u = reader.get(f"{stack.spec.prefix.format(i=i)}.pos_bias_u").flatten()
                layer = replace(layer, b_q=layer.b_q + u)  # the content term's query bias
            yield layer


def _declared_stacks(config: PretrainedConfig) -> tuple[str, ...] | None:
    """The stacks a ``SeamlessM4TFor{Text,Speech}To{Text,Speech}`` holds; None for the full model."""
    for name in getattr(config, "architectures", None) or ():
        source, _, target = name.removeprefix("SeamlessM4TFor").partition("To")
        if source in ("Text", "Speech") and target in ("Text", "Speech"):
            inputs = ("text_encoder",) if source == "Text" else SPEECH_IN
            return inputs + TEXT_OUT + (SPEECH_OUT if target == "Speech" else ())
    return None


def _count(config: PretrainedConfig) -> int:
    declared = _declared_stacks(config)
    return sum(stack.n_layers for stack in _stacks(config) if declared is None or stack.name in declared)


ARCHITECTURES: list[Architecture] = [
    Architecture(
        model_types=("seamless_m4t",),
        modality="multimodal",
        objective="encoder-decoder",
        layers=_seamless_layers,
        n_layers=_count,
        notes="text and Conformer speech encoders, text decoder and text-to-unit model: one stack each",
        stacks=("text_encoder", *SPEECH_IN, *TEXT_OUT, *SPEECH_OUT),
        stack_modality={
            "text_encoder": "language",
            "speech_encoder": "audio",
            "speech_adapter": "audio",
            "decoder": "language",
            "t2u_encoder": "language",
            "t2u_decoder": "audio",
        },
        why=(
            "speech and text towers and a text-to-unit model whose audio or language roles its module paths "
            "do not say"
        ),
    ),
]
