"""Bidirectional (encoder-only) language models.

One small function per tensor layout; families with the same layout share it. What each form leaves
out of the raw attention score (biases, the 1/√d_h scale, position terms) is recorded in ``left_out``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..base import (
    Architecture,
    ArchitectureError,
    AttentionLayer,
    TensorReader,
    linear,
    separate_layers,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig


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


def _deberta_position_terms(config: PretrainedConfig) -> tuple[str, ...]:
    """DeBERTa's disentangled c2p/p2c terms (and absolute positions, where added to the input)."""
    terms = ("relative_position",) if getattr(config, "relative_attention", False) else ()
    if getattr(config, "position_biased_input", True):
        terms += ("absolute_position_embeddings",)
    return terms


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


def _encoder_family(
    model_types: tuple[str, ...], layers, notes: str = "", n_layers=None, *, why: str
) -> Architecture:
    return Architecture(
        model_types=model_types,
        modality="language",
        objective="bidirectional",
        layers=layers,
        n_layers=n_layers or (lambda c: c.num_hidden_layers),
        notes=notes,
        stacks=("encoder",),
        why=why,
    )


MOBILEBERT = _encoder_family(
    ("mobilebert",),
    _mobilebert_layers,
    notes="q/k act on the true_hidden_size bottleneck, not the residual",
    why="its tiny model does not run (discovery refuses it); q/k read the true_hidden_size bottleneck",
)
DEBERTA = _encoder_family(
    ("deberta",),
    _deberta_layers,
    notes="content-to-content term; c2p/p2c terms are left out",
    why="q and k fused in in_proj rows per head with a separate q_bias: no q/k projections to discover",
)


ARCHITECTURES: list[Architecture] = [MOBILEBERT, DEBERTA]
