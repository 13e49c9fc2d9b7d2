"""Encoder-decoder models: an ``encoder`` and a ``decoder`` self-attention stack, and a ``cross`` stack.

The cross stack is decoder queries against encoder keys, a form between two spaces (``cross=True``):
it is scored as its own stack, without symmetry, and never mixed into the self-attention stacks.
Every stack keeps the model's objective (``encoder-decoder``), as the paper's Figure S2 groups them;
the ``stack`` column tells the encoder from the decoder.

Partial checkpoints hold some of the stacks: a decoder alone with its cross-attention
(``BartForCausalLM``, ``WhisperForCausalLM``: distilled assistant decoders), an encoder alone
(``T5EncoderModel``, ``WhisperForAudioClassification``). The stacks a checkpoint holds are read from
its tensor names (the first layer's query projection of each stack); its ``architectures`` field says
whether a missing stack is expected. A complete model missing a stack is an error naming the tensor.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..base import Architecture, AttentionLayer, TensorReader, separate_qk
from .longformer import GLOBAL_STACK, TWO_FORMS, longformer_stacks

if TYPE_CHECKING:
    from transformers import PretrainedConfig

POSITIONS_IN_INPUT = (
    "q and k read x + p (position embeddings added to the q/k inputs, not to v): a form of the "
    "position-augmented input, which discovery would call standard"
)


CROSS_FORM = "cross: decoder x W_q W_kᵀ encoder xᵀ (two spaces)"
POSITION_FORM = "position_augmented: (x + p) W_q W_kᵀ (x + p)ᵀ, p the position embedding added to q/k inputs"
POSITION_CROSS_FORM = (
    "position_augmented cross: (x + p) W_q W_kᵀ (x_enc + p_enc)ᵀ, position embeddings added to q/k inputs"
)
PARTIAL_CLASSES = ("ForCausalLM", "EncoderModel", "ForAudioClassification")
"""Class-name endings of checkpoints that hold only some stacks of an encoder-decoder family."""


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


@dataclass(frozen=True)
class Stack:
    """One stack of an encoder-decoder: its name, layer count, head shape and projections."""

    name: str
    spec: Projections
    n_layers: int
    heads: int
    head_dim: int

    @property
    def first_query(self) -> str:
        return f"{self.spec.prefix.format(i=0)}.{self.spec.q}.weight"


StacksFn = Callable[["PretrainedConfig"], list[Stack]]


def stack_layer(reader: TensorReader, stack: Stack, index: int) -> AttentionLayer:
    """Layer ``index`` of ``stack``, read through its projections."""
    spec = stack.spec
    prefix = spec.prefix.format(i=index)
    return AttentionLayer(
        stack=stack.name,
        layer=index,
        **separate_qk(reader, f"{prefix}.{spec.q}", f"{prefix}.{spec.k}", spec.q_bias, spec.k_bias),
        n_heads=stack.heads,
        n_kv_heads=stack.heads,
        head_dim=stack.head_dim,
        left_out=spec.left_out,
        form=spec.form,
        cross="cross" in stack.name,
    )


def _declared_partial(config: PretrainedConfig) -> bool:
    return any(name.endswith(PARTIAL_CLASSES) for name in getattr(config, "architectures", None) or ())


def held_stacks(config: PretrainedConfig, reader: TensorReader, stacks: list[Stack]) -> list[Stack]:
    """The stacks whose first query projection the checkpoint holds.

    All of them where every stack is there, none is, or the config declares a complete model (then
    reading the missing stack raises the error that names its tensor); otherwise (a partial class, or
    an in-memory model without ``architectures``) the ones present.
    """
    held = [stack for stack in stacks if reader.has(stack.first_query)]
    if len(held) in (0, len(stacks)):
        return stacks
    if getattr(config, "architectures", None) and not _declared_partial(config):
        return stacks
    return held


def _declared_count(config: PretrainedConfig, stacks: list[Stack]) -> int:
    """Layers the progress bar expects: a ``…ForCausalLM`` holds the decoder and cross stacks, an
    ``…EncoderModel`` / ``…ForAudioClassification`` the encoder, any other class every stack."""
    names = getattr(config, "architectures", None) or ()
    if any(name.endswith("ForCausalLM") for name in names):
        stacks = [stack for stack in stacks if stack.name in ("decoder", "cross")]
    elif any(name.endswith(("EncoderModel", "ForAudioClassification")) for name in names):
        stacks = [stack for stack in stacks if stack.name == "encoder"]
    return sum(stack.n_layers for stack in stacks)


def _seq2seq(
    model_types: tuple[str, ...],
    modality: str,
    stacks: StacksFn,
    notes: str = "",
    names: tuple[str, ...] = ("encoder", "decoder", "cross"),
    *,
    why: str,
) -> Architecture:
    """An encoder-decoder family whose layers are its stacks, in order, as far as the checkpoint holds them."""

    def layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
        for stack in held_stacks(config, reader, stacks(config)):
            for i in range(stack.n_layers):
                yield stack_layer(reader, stack, i)

    return Architecture(
        model_types=model_types,
        modality=modality,
        objective="encoder-decoder",
        layers=layers,
        n_layers=lambda config: _declared_count(config, stacks(config)),
        notes=notes,
        stacks=names,
        why=why,
    )


def _bart_stacks(
    config: PretrainedConfig,
    *,
    encoder_prefix: str = "encoder.layers.{i}.self_attn",
    decoder_prefix: str = "decoder.layers.{i}",
    k_bias: bool = True,
    left_out: tuple[str, ...] = ("bias", "scale", "absolute_position_embeddings"),
    encoder_left_out: tuple[str, ...] | None = None,
    self_form: str = "standard",
    cross_form: str = CROSS_FORM,
) -> list[Stack]:
    """BART-style layouts: ``q_proj``/``k_proj`` in ``self_attn`` and ``encoder_attn``."""
    encoder_left_out = left_out if encoder_left_out is None else encoder_left_out
    d = getattr(config, "d_model", None) or config.hidden_size  # SpeechT5 names it hidden_size
    enc_heads, dec_heads = config.encoder_attention_heads, config.decoder_attention_heads
    return [
        Stack(
            "encoder",
            Projections(encoder_prefix, k_bias=k_bias, left_out=encoder_left_out, form=self_form),
            config.encoder_layers,
            enc_heads,
            d // enc_heads,
        ),
        Stack(
            "decoder",
            Projections(decoder_prefix + ".self_attn", k_bias=k_bias, left_out=left_out, form=self_form),
            config.decoder_layers,
            dec_heads,
            d // dec_heads,
        ),
        Stack(
            "cross",
            Projections(decoder_prefix + ".encoder_attn", k_bias=k_bias, left_out=left_out, form=cross_form),
            config.decoder_layers,
            dec_heads,
            d // dec_heads,
        ),
    ]


def _speecht5_stacks(config: PretrainedConfig) -> list[Stack]:
    """SpeechT5: the encoder adds a relative-position term to its scores (outside the form)."""
    return _bart_stacks(
        config,
        encoder_prefix="encoder.wrapped_encoder.layers.{i}.attention",
        decoder_prefix="decoder.wrapped_decoder.layers.{i}",
        encoder_left_out=("bias", "scale", "relative_position"),
    )


def _detr_stacks(config: PretrainedConfig) -> list[Stack]:
    """DETR adds position embeddings to the q/k inputs (not to v): the form of X + P is scored."""
    return _bart_stacks(
        config, left_out=("bias", "scale"), self_form=POSITION_FORM, cross_form=POSITION_CROSS_FORM
    )


def _t5_spec(prefix: str, left_out: tuple[str, ...], form: str = "standard") -> Projections:
    """T5 / T5 v1.1 / mT5 / UMT5: projections ``q``/``k`` without biases, and no 1/√d_kv scaling."""
    return Projections(prefix, q="q", k="k", q_bias=False, k_bias=False, left_out=left_out, form=form)


T5_ENCODER = _t5_spec("encoder.block.{i}.layer.0.SelfAttention", ("relative_position",))


def _t5_decoder_stacks(config: PretrainedConfig) -> list[Stack]:
    layers = getattr(config, "num_decoder_layers", None) or config.num_layers
    return [
        Stack(
            "decoder",
            _t5_spec("decoder.block.{i}.layer.0.SelfAttention", ("relative_position",)),
            layers,
            config.num_heads,
            config.d_kv,
        ),
        Stack(
            "cross",
            _t5_spec("decoder.block.{i}.layer.1.EncDecAttention", (), CROSS_FORM),
            layers,
            config.num_heads,
            config.d_kv,
        ),
    ]


def _longt5_stacks(config: PretrainedConfig) -> list[Stack]:
    """LongT5: the encoder attends within local blocks (``local_window``); with transient-global attention
    every token also attends to per-block aggregates of the layer input, keyed by the same W_k."""
    transient = config.encoder_attention_type == "transient-global"
    module = "TransientGlobalSelfAttention" if transient else "LocalSelfAttention"
    left_out = ("relative_position", "local_window") + (("transient_global",) if transient else ())
    spec = _t5_spec(f"encoder.block.{{i}}.layer.0.{module}", left_out)
    encoder = Stack("encoder", spec, config.num_layers, config.num_heads, config.d_kv)
    return [encoder, *_t5_decoder_stacks(config)]


def _musicgen_decoder_stacks(decoder: PretrainedConfig, prefix: str = "decoder.") -> list[Stack]:
    """MusicGen's audio-token decoder: BART-style names without biases, cross-attention to the text."""
    heads = decoder.num_attention_heads
    head_dim = decoder.hidden_size // heads
    left_out = ("absolute_position_embeddings", "scale")
    spec = Projections(prefix + "layers.{i}.self_attn", q_bias=False, k_bias=False, left_out=left_out)
    cross = Projections(
        prefix + "layers.{i}.encoder_attn", q_bias=False, k_bias=False, left_out=("scale",), form=CROSS_FORM
    )
    layers = decoder.num_hidden_layers
    return [Stack("decoder", spec, layers, heads, head_dim), Stack("cross", cross, layers, heads, head_dim)]


def _musicgen_stacks(config: PretrainedConfig) -> list[Stack]:
    """MusicGen: a T5 text encoder, and a BART-style audio-token decoder with cross-attention to it."""
    text = config.text_encoder
    encoder = replace(T5_ENCODER, prefix="text_encoder." + T5_ENCODER.prefix)
    return [
        Stack("encoder", encoder, text.num_layers, text.num_heads, text.d_kv),
        *_musicgen_decoder_stacks(config.decoder),
    ]


def _led_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """LED: a Longformer encoder (local ``encoder`` and ``encoder_global`` stacks), a BART decoder."""
    yield from longformer_stacks(
        reader,
        "encoder.layers.{i}.self_attn.longformer_self_attn",
        config.encoder_layers,
        config.encoder_attention_heads,
        config.d_model,
    )
    for stack in _bart_stacks(config)[1:]:
        for i in range(stack.n_layers):
            yield stack_layer(reader, stack, i)


LONGT5 = _seq2seq(
    ("longt5",),
    "language",
    _longt5_stacks,
    notes="T5 layout; local or transient-global encoder attention",
    why=(
        "its local blocks' masks read as causal in the tiny model: discovery's objective would be "
        "autoregressive"
    ),
)
SPEECHT5 = _seq2seq(
    ("speecht5",),
    "audio",
    _speecht5_stacks,
    why=(
        "its prenets keep the whole forward pass from running: its roles are not observed; the paper's "
        "reference names its stacks encoder and decoder"
    ),
)
MUSICGEN = _seq2seq(
    ("musicgen",),
    "audio",
    _musicgen_stacks,
    why=(
        "its decoder reads audio codes, not text (modality audio); the paper's reference names its stacks"
        " encoder and decoder"
    ),
)
MUSICGEN_DECODER = _seq2seq(
    ("musicgen_decoder",),
    "audio",
    lambda c: _musicgen_decoder_stacks(c, prefix=""),
    notes="MusicgenForCausalLM: MusicGen's decoder and its cross-attention",
    names=("decoder", "cross"),
    why="MusicGen's decoder alone: as musicgen",
)
DETR = _seq2seq(("detr",), "vision", _detr_stacks, why=POSITIONS_IN_INPUT)
LED = Architecture(
    model_types=("led",),
    modality="language",
    objective="encoder-decoder",
    layers=_led_layers,
    n_layers=lambda c: 2 * c.encoder_layers + 2 * c.decoder_layers,
    notes="Longformer encoder (local and global stacks) and BART decoder",
    stacks=("encoder", GLOBAL_STACK, "decoder", "cross"),
    why=TWO_FORMS,
)


ARCHITECTURES: list[Architecture] = [LONGT5, SPEECHT5, MUSICGEN, MUSICGEN_DECODER, DETR, LED]
