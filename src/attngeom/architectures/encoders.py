"""Bidirectional (encoder-only) language models.

One small function per tensor layout; families with the same layout share it. What each form leaves
out of the raw attention score (biases, the 1/√d_h scale, position terms) is recorded in ``left_out``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .base import (
    Architecture,
    ArchitectureError,
    AttentionLayer,
    TensorReader,
    fused_qkv,
    head_dim_of,
    linear,
    separate_layers,
    separate_qk,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _position_terms(config: PretrainedConfig) -> tuple[str, ...]:
    """Learned absolute positions, or (older BERT configs) relative key terms added to the score."""
    kind = getattr(config, "position_embedding_type", None) or "absolute"
    return ("absolute_position_embeddings",) if kind == "absolute" else ("relative_position",)


def _bert_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BERT, RoBERTa, XLM-RoBERTa(-XL), CamemBERT, ELECTRA: ``attention.self.{query,key}`` per layer.

    A causal BERT (``is_decoder=True``, as the training runs use) has the same form; only its mask differs,
    and its stack is recorded as ``decoder``.
    """
    return separate_layers(
        config,
        reader,
        "encoder.layer.{i}.attention.self",
        "query",
        "key",
        stack="decoder" if getattr(config, "is_decoder", False) else "encoder",
        left_out=("scale", *_position_terms(config)),
    )


def _esm_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ESM protein language models: BERT's names on pre-LayerNorm layers; ESM-2 rotates q and k (rotary),
    ESM-1b adds learned absolute positions to the input; q is scaled by 1/√d_h before the rotation."""
    kind = getattr(config, "position_embedding_type", None) or "absolute"
    positions = ("rotary",) if kind == "rotary" else _position_terms(config)
    return separate_layers(
        config,
        reader,
        "encoder.layer.{i}.attention.self",
        "query",
        "key",
        stack="encoder",
        left_out=("scale", *positions),
    )


def _mobilebert_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """MobileBERT: BERT's names, but q and k read the ``true_hidden_size``-wide bottleneck of the layer
    input (not the residual stream), so the form is ``true_hidden_size`` square."""
    return separate_layers(
        config,
        reader,
        "encoder.layer.{i}.attention.self",
        "query",
        "key",
        stack="encoder",
        left_out=("scale", "absolute_position_embeddings"),
        head_dim=config.true_hidden_size // config.num_attention_heads,
    )


def _big_bird_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BigBird: BERT's names; block-sparse attention (window, global and random blocks) masks the form."""
    sparse = ("block_sparse",) if config.attention_type == "block_sparse" else ()
    return separate_layers(
        config,
        reader,
        "encoder.layer.{i}.attention.self",
        "query",
        "key",
        stack="encoder",
        left_out=("scale", *_position_terms(config), *sparse),
    )


def _distilbert_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """DistilBERT: ``transformer.layer.{i}.attention.{q_lin,k_lin}``; learned or sinusoidal positions."""
    return separate_layers(
        config,
        reader,
        "transformer.layer.{i}.attention",
        "q_lin",
        "k_lin",
        stack="encoder",
        left_out=("scale", "absolute_position_embeddings"),
    )


def _albert_applications(config: PretrainedConfig) -> Iterator[tuple[int, int]]:
    """(group, inner layer) of every attention application, in the order the model's forward runs them."""
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    for i in range(layers):
        group = int(i / (layers / groups))  # the model's own group index formula
        for inner in range(config.inner_group_num):
            yield group, inner


def _albert_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ALBERT shares layer groups: one row per application, so shared weights repeat across layer indices.

    Layer index ``i · inner_group_num + j`` is the j-th inner layer of the group the i-th hidden layer
    runs (``num_hidden_layers · inner_group_num`` applications in all; ALBERT's released models have
    one group of one layer, so every layer repeats the same weights).
    """
    return separate_layers(
        config,
        reader,
        (
            f"encoder.albert_layer_groups.{group}.albert_layers.{inner}.attention"
            for group, inner in _albert_applications(config)
        ),
        "query",
        "key",
        stack="encoder",
        left_out=("scale", "absolute_position_embeddings"),
    )


def _modernbert_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ModernBERT: fused ``attn.Wqkv`` viewed as (3, H, d_h); rotary; global and sliding-window layers."""
    heads = config.num_attention_heads
    has_bias = reader.has("layers.0.attn.Wqkv.bias")
    for i in range(config.num_hidden_layers):
        prefix = f"layers.{i}.attn.Wqkv"
        window = ("sliding_window",) if config.layer_types[i] == "sliding_attention" else ()
        yield AttentionLayer(
            stack="encoder",
            layer=i,
            **fused_qkv(reader.get(f"{prefix}.weight"), reader.get(f"{prefix}.bias") if has_bias else None),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=config.hidden_size // heads,
            left_out=(("bias",) if has_bias else ()) + ("rotary", "scale", *window),
        )


_NOMIC_ORIGINAL_NAMES = {
    "n_embd": "hidden_size",
    "n_head": "num_attention_heads",
    "n_layer": "num_hidden_layers",
}


def _nomic_bert_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """NomicBERT: ``self_attn.{q,k}_proj`` in memory; on disk the original fused ``attn.Wqkv`` blocks."""
    for original, name in _NOMIC_ORIGINAL_NAMES.items():
        if getattr(config, original, None) not in (None, getattr(config, name)):
            raise ArchitectureError(
                f"nomic_bert config sets {original}={getattr(config, original)} but transformers reads "
                f"{name}={getattr(config, name)}; set {name} in config.json to the model's real size"
            )
    heads = config.num_attention_heads
    fused = not reader.has("layers.0.self_attn.q_proj.weight")
    has_bias = fused and reader.has("encoder.layers.0.attn.Wqkv.bias")
    for i in range(config.num_hidden_layers):
        if fused:
            prefix = f"encoder.layers.{i}.attn.Wqkv"
            bias = reader.get(f"{prefix}.bias") if has_bias else None
            tensors = fused_qkv(reader.get(f"{prefix}.weight"), bias)
        else:
            prefix = f"layers.{i}.self_attn"
            tensors = separate_qk(reader, f"{prefix}.q_proj", f"{prefix}.k_proj", q_bias=False, k_bias=False)
        yield AttentionLayer(
            stack="encoder",
            layer=i,
            **tensors,
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=head_dim_of(config, heads),
            left_out=(("bias",) if has_bias else ()) + ("rotary", "scale"),
        )


def _deberta_position_terms(config: PretrainedConfig) -> tuple[str, ...]:
    """DeBERTa's disentangled c2p/p2c terms (and absolute positions, where added to the input)."""
    terms = ("relative_position",) if getattr(config, "relative_attention", False) else ()
    if getattr(config, "position_biased_input", True):
        terms += ("absolute_position_embeddings",)
    return terms


def _deberta_v2_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """DeBERTa v2/v3: ``query_proj``/``key_proj``; the form is the content-to-content term only."""
    return separate_layers(
        config,
        reader,
        "encoder.layer.{i}.attention.self",
        "query_proj",
        "key_proj",
        stack="encoder",
        left_out=("scale", *_deberta_position_terms(config)),
    )


def _deberta_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """DeBERTa v1: ``in_proj`` rows per head as [q_h | k_h | v_h]; a query bias ``q_bias``, no key bias."""
    if getattr(config, "talking_head", False):
        raise ArchitectureError(
            "deberta with talking_head=True mixes the heads' scores; its attention is not one form per head"
        )
    heads = config.num_attention_heads
    head_dim = config.hidden_size // heads
    left_out = ("bias", "scale", *_deberta_position_terms(config))
    for i in range(config.num_hidden_layers):
        prefix = f"encoder.layer.{i}.attention.self"
        per_head = reader.get(f"{prefix}.in_proj.weight").reshape(heads, 3, head_dim, -1)
        yield AttentionLayer(
            stack="encoder",
            layer=i,
            w_q=linear(per_head[:, 0].reshape(heads * head_dim, -1)),
            w_k=linear(per_head[:, 1].reshape(heads * head_dim, -1)),
            b_q=reader.get(f"{prefix}.q_bias"),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=head_dim,
            left_out=left_out,
        )


def _mpnet_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """MPNet: ``attention.attn.{q,k}``; a bucketed relative-position bias is added to the score."""
    return separate_layers(
        config,
        reader,
        "encoder.layer.{i}.attention.attn",
        "q",
        "k",
        stack="encoder",
        left_out=("scale", "relative_position", "absolute_position_embeddings"),
    )


def _encoder_family(model_types: tuple[str, ...], layers, notes: str = "", n_layers=None) -> Architecture:
    return Architecture(
        model_types=model_types,
        modality="language",
        objective="bidirectional",
        layers=layers,
        n_layers=n_layers or (lambda c: c.num_hidden_layers),
        notes=notes,
        stacks=("encoder",),
    )


BERT = _encoder_family(
    ("bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "electra"), _bert_layers
)
BERT_LAYOUT = _encoder_family(
    ("ernie", "data2vec-text", "rembert"),
    _bert_layers,
    notes="BERT layout (RemBERT: factorised input embeddings)",
)
ESM = _encoder_family(("esm",), _esm_layers, notes="protein LMs: BERT layout, pre-LayerNorm; ESM-2 rotary")
MOBILEBERT = _encoder_family(
    ("mobilebert",), _mobilebert_layers, notes="q/k act on the true_hidden_size bottleneck, not the residual"
)
BIG_BIRD = _encoder_family(
    ("big_bird",), _big_bird_layers, notes="BERT layout; block-sparse attention listed in left_out"
)
DISTILBERT = _encoder_family(("distilbert",), _distilbert_layers)
ALBERT = _encoder_family(
    ("albert",),
    _albert_layers,
    notes="shared layer groups: one row per application (num_hidden_layers × inner_group_num), "
    "so shared weights repeat across layer indices",
    n_layers=lambda c: c.num_hidden_layers * c.inner_group_num,
)
MODERNBERT = _encoder_family(
    ("modernbert",), _modernbert_layers, notes="local (sliding-window) layers list sliding_window in left_out"
)
NOMIC_BERT = _encoder_family(("nomic_bert",), _nomic_bert_layers)
DEBERTA_V2 = _encoder_family(
    ("deberta-v2",), _deberta_v2_layers, notes="content-to-content term; c2p/p2c terms are left out"
)
DEBERTA = _encoder_family(
    ("deberta",), _deberta_layers, notes="content-to-content term; c2p/p2c terms are left out"
)
MPNET = _encoder_family(("mpnet",), _mpnet_layers, notes="relative-position bias is left out")

ARCHITECTURES: list[Architecture] = [
    BERT,
    BERT_LAYOUT,
    ESM,
    MOBILEBERT,
    BIG_BIRD,
    DISTILBERT,
    ALBERT,
    MODERNBERT,
    NOMIC_BERT,
    DEBERTA_V2,
    DEBERTA,
    MPNET,
]
