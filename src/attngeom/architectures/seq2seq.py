"""Encoder-decoder models: an ``encoder`` and a ``decoder`` self-attention stack, and a ``cross`` stack.

The cross stack is decoder queries against encoder keys, a form between two spaces (``cross=True``):
it is scored as its own stack, without symmetry, and never mixed into the self-attention stacks.
Every stack keeps the model's objective (``encoder-decoder``), as the paper's Figure S2 groups them;
the ``stack`` column tells the encoder from the decoder.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from transformers import PretrainedConfig

from .base import Architecture, AttentionLayer, TensorReader, separate_qk

CROSS_FORM = "cross: decoder x W_q W_kᵀ encoder xᵀ (two spaces)"
POSITION_FORM = "position_augmented: (x + p) W_q W_kᵀ (x + p)ᵀ, p the position embedding added to q/k inputs"
POSITION_CROSS_FORM = (
    "position_augmented cross: (x + p) W_q W_kᵀ (x_enc + p_enc)ᵀ, position embeddings added to q/k inputs"
)


@dataclass(frozen=True)
class Projections:
    """Where one attention block's q/k projections live, and what its form leaves out."""

    prefix: str
    q: str = "q_proj"
    k: str = "k_proj"
    q_bias: bool = True
    k_bias: bool = True
    left_out: tuple[str, ...] = ("bias", "scale")
    form: str = "standard"


def _layer(
    reader: TensorReader,
    stack: str,
    index: int,
    spec: Projections,
    heads: int,
    head_dim: int,
    cross: bool = False,
) -> AttentionLayer:
    prefix = spec.prefix.format(i=index)
    return AttentionLayer(
        stack=stack,
        layer=index,
        **separate_qk(reader, f"{prefix}.{spec.q}", f"{prefix}.{spec.k}", spec.q_bias, spec.k_bias),
        n_heads=heads,
        n_kv_heads=heads,
        head_dim=head_dim,
        left_out=spec.left_out,
        form=spec.form,
        cross=cross,
    )


def _encoder_decoder(
    reader: TensorReader,
    *,
    encoder: Projections,
    decoder: Projections,
    cross: Projections,
    encoder_layers: int,
    decoder_layers: int,
    encoder_heads: int,
    decoder_heads: int,
    encoder_head_dim: int,
    decoder_head_dim: int,
) -> Iterator[AttentionLayer]:
    for i in range(encoder_layers):
        yield _layer(reader, "encoder", i, encoder, encoder_heads, encoder_head_dim)
    for i in range(decoder_layers):
        yield _layer(reader, "decoder", i, decoder, decoder_heads, decoder_head_dim)
    for i in range(decoder_layers):
        yield _layer(reader, "cross", i, cross, decoder_heads, decoder_head_dim, cross=True)


def _bart_family(
    config: PretrainedConfig,
    reader: TensorReader,
    *,
    encoder_prefix: str = "encoder.layers.{i}.self_attn",
    decoder_prefix: str = "decoder.layers.{i}",
    k_bias: bool = True,
    left_out: tuple[str, ...] = ("bias", "scale", "absolute_position_embeddings"),
    encoder_left_out: tuple[str, ...] | None = None,
    self_form: str = "standard",
    cross_form: str = CROSS_FORM,
) -> Iterator[AttentionLayer]:
    """BART-style layouts: ``q_proj``/``k_proj`` in ``self_attn`` and ``encoder_attn``."""
    encoder_left_out = left_out if encoder_left_out is None else encoder_left_out
    d = getattr(config, "d_model", None) or config.hidden_size  # SpeechT5 names it hidden_size
    return _encoder_decoder(
        reader,
        encoder=Projections(encoder_prefix, k_bias=k_bias, left_out=encoder_left_out, form=self_form),
        decoder=Projections(decoder_prefix + ".self_attn", k_bias=k_bias, left_out=left_out, form=self_form),
        cross=Projections(
            decoder_prefix + ".encoder_attn", k_bias=k_bias, left_out=left_out, form=cross_form
        ),
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_heads=config.encoder_attention_heads,
        decoder_heads=config.decoder_attention_heads,
        encoder_head_dim=d // config.encoder_attention_heads,
        decoder_head_dim=d // config.decoder_attention_heads,
    )


def _bart_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return _bart_family(config, reader)


def _whisper_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Whisper's k_proj has no bias (q_proj has one)."""
    return _bart_family(config, reader, k_bias=False)


def _speecht5_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """SpeechT5: the encoder adds a relative-position term to its scores (outside the form)."""
    return _bart_family(
        config,
        reader,
        encoder_prefix="encoder.wrapped_encoder.layers.{i}.attention",
        decoder_prefix="decoder.wrapped_decoder.layers.{i}",
        encoder_left_out=("bias", "scale", "relative_position"),
    )


def _detr_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """DETR adds position embeddings to the q/k inputs (not to v): the form of X + P is scored."""
    return _bart_family(
        config,
        reader,
        left_out=("bias", "scale"),
        self_form=POSITION_FORM,
        cross_form=POSITION_CROSS_FORM,
    )


def _t5_spec(prefix: str, left_out: tuple[str, ...], form: str = "standard") -> Projections:
    """T5 / T5 v1.1 / mT5 / UMT5: projections ``q``/``k`` without biases, and no 1/√d_kv scaling."""
    return Projections(prefix, q="q", k="k", q_bias=False, k_bias=False, left_out=left_out, form=form)


T5_ENCODER = _t5_spec("encoder.block.{i}.layer.0.SelfAttention", ("relative_position",))


def _t5_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Head width ``d_kv``; self-attention adds a relative position bias (outside the form).

    An encoder-only checkpoint (T5EncoderModel, as text encoders of diffusion models are saved) yields
    the encoder stack alone.
    """
    if not reader.has("decoder.block.0.layer.0.SelfAttention.q.weight"):
        for i in range(config.num_layers):
            yield _layer(reader, "encoder", i, T5_ENCODER, config.num_heads, config.d_kv)
        return
    yield from _encoder_decoder(
        reader,
        encoder=T5_ENCODER,
        decoder=_t5_spec("decoder.block.{i}.layer.0.SelfAttention", ("relative_position",)),
        cross=_t5_spec("decoder.block.{i}.layer.1.EncDecAttention", (), CROSS_FORM),
        encoder_layers=config.num_layers,
        decoder_layers=_t5_decoder_layers(config),
        encoder_heads=config.num_heads,
        decoder_heads=config.num_heads,
        encoder_head_dim=config.d_kv,
        decoder_head_dim=config.d_kv,
    )


def _t5_decoder_layers(config: PretrainedConfig) -> int:
    return getattr(config, "num_decoder_layers", None) or config.num_layers


def _musicgen_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """MusicGen: a T5 text encoder, and a BART-style audio-token decoder with cross-attention to it."""
    text = config.text_encoder
    encoder = replace(T5_ENCODER, prefix="text_encoder." + T5_ENCODER.prefix)
    for i in range(text.num_layers):
        yield _layer(reader, "encoder", i, encoder, text.num_heads, text.d_kv)
    decoder = config.decoder
    heads = decoder.num_attention_heads
    head_dim = decoder.hidden_size // heads
    left_out = ("absolute_position_embeddings", "scale")
    spec = Projections("decoder.layers.{i}.self_attn", q_bias=False, k_bias=False, left_out=left_out)
    cross = Projections(
        "decoder.layers.{i}.encoder_attn", q_bias=False, k_bias=False, left_out=("scale",), form=CROSS_FORM
    )
    for i in range(decoder.num_hidden_layers):
        yield _layer(reader, "decoder", i, spec, heads, head_dim)
    for i in range(decoder.num_hidden_layers):
        yield _layer(reader, "cross", i, cross, heads, head_dim, cross=True)


def _bart_count(config: PretrainedConfig) -> int:
    return config.encoder_layers + 2 * config.decoder_layers


def _t5_count(config: PretrainedConfig) -> int:
    return config.num_layers + 2 * _t5_decoder_layers(config)


def _seq2seq(
    model_types: tuple[str, ...], modality: str, layers, n_layers=_bart_count, notes: str = ""
) -> Architecture:
    return Architecture(
        model_types=model_types,
        modality=modality,
        objective="encoder-decoder",
        layers=layers,
        n_layers=n_layers,
        notes=notes,
        stacks=("encoder", "decoder", "cross"),
    )


BART = _seq2seq(
    ("bart", "mbart", "marian", "pegasus", "m2m_100", "plbart", "blenderbot", "blenderbot-small"),
    "language",
    _bart_layers,
)
T5 = _seq2seq(
    ("t5", "mt5", "umt5"),
    "language",
    _t5_layers,
    _t5_count,
    notes="T5 v1.1 is model_type t5; no 1/√d_kv scaling and no biases, so nothing but positions is left out",
)
WHISPER = _seq2seq(("whisper",), "audio", _whisper_layers)
SPEECH2TEXT = _seq2seq(("speech_to_text",), "audio", _bart_layers)
SPEECHT5 = _seq2seq(("speecht5",), "audio", _speecht5_layers)
MUSICGEN = _seq2seq(
    ("musicgen",),
    "audio",
    _musicgen_layers,
    lambda c: c.text_encoder.num_layers + 2 * c.decoder.num_hidden_layers,
)
DETR = _seq2seq(("detr",), "vision", _detr_layers)

ARCHITECTURES: list[Architecture] = [BART, T5, WHISPER, SPEECH2TEXT, SPEECHT5, MUSICGEN, DETR]
