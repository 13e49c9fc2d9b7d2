"""Models of the interpretability libraries: TransformerLens' ``HookedTransformer`` and ``TransformerBridge``,
and nnsight wrappers.

Neither library is imported: an object is recognised by the module its class comes from. An nnsight
wrapper (``NNsight``, ``LanguageModel``) holds the transformers model it wraps (``._module``; ``._model``
in older releases), which is scored as any in-memory model. A ``HookedTransformer`` keeps W_Q and W_K
per layer as ``[n_heads, d_model, d_head]`` parameters (``_W_K`` ``[n_key_value_heads, ...]`` under
grouped-query attention); these are read as they are, in TransformerLens' x W convention, so what is
scored is what the object holds: with the weight processing of ``HookedTransformer.from_pretrained``
(``fold_ln``) the LayerNorm scale is folded into W_Q and W_K and the scores differ from the checkpoint's;
``from_pretrained_no_processing`` keeps the checkpoint's q/k weights. A ``TransformerBridge`` (wrapping
a transformers model in place) gives the same W_Q and W_K per block (``blocks[i].attn.W_Q``), read from
the wrapped model's own q/k weights: the checkpoint's as ``boot_transformers`` leaves them, the processed
ones after ``enable_compatibility_mode``. A model whose q and k are normalised per head after their
projection (``use_qk_norm``) has no form in W_Q and W_K alone and is refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..errors import InputError
from .base import WeightSource

MODEL_TYPE = "hooked_transformer"
"""The ``model_type`` of a HookedTransformer's records and of its architecture map."""


def _library(model: object) -> str:
    return type(model).__module__.split(".")[0]


def unwrap(model: object) -> object:
    """The transformers model inside an nnsight wrapper; anything else as it is."""
    if _library(model) != "nnsight":
        return model
    for name in ("_module", "_model"):
        inner = getattr(model, name, None)
        if isinstance(inner, torch.nn.Module):
            return inner
    raise InputError(f"{type(model).__name__}: an nnsight object without the model it wraps (._module)")


def is_hooked_transformer(model: object) -> bool:
    """A ``HookedTransformer`` or a ``TransformerBridge``: TransformerLens' objects with ``cfg`` and ``blocks``."""
    return _library(model) == "transformer_lens" and hasattr(model, "cfg") and hasattr(model, "blocks")


def _bridged(model: object) -> bool:
    """A ``TransformerBridge``: the transformers model it wraps is its ``original_model``."""
    return "original_model" in vars(model)


def _weights(model: torch.nn.Module, grouped: bool) -> dict[str, torch.Tensor]:
    """W_Q and W_K of every block by their HookedTransformer names: a HookedTransformer's parameters, a
    bridge's per-block properties (computed from the wrapped model's q/k weights)."""
    if not _bridged(model):
        return dict(model.named_parameters(remove_duplicate=False))
    key = "_W_K" if grouped else "W_K"
    weights = {}
    for i, block in enumerate(model.blocks):
        weights[f"blocks.{i}.attn.W_Q"] = block.attn.W_Q
        weights[f"blocks.{i}.attn.{key}"] = block.attn.W_K
    return weights


@dataclass(frozen=True)
class LensConfig:
    """What the architecture map needs of a HookedTransformer's ``cfg`` (and what identifies it)."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_head: int
    bidirectional: bool
    positional_embedding_type: str
    original_architecture: str | None
    model_type: str = MODEL_TYPE

    @property
    def use_bidirectional_attention(self) -> bool:  # read by Architecture.objective_of
        return self.bidirectional

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def from_hooked_transformer(model: torch.nn.Module) -> WeightSource:
    """A HookedTransformer's (or a TransformerBridge's) W_Q/W_K by their names (``blocks.{i}.attn.W_Q``)."""
    cfg = model.cfg
    kind = type(model).__name__
    if getattr(cfg, "use_qk_norm", False):
        raise InputError(
            f"in-memory {kind}: q and k are normalised per head after W_Q/W_K (use_qk_norm), which W_Q and "
            "W_K alone do not state; score the transformers model or its checkpoint instead"
        )
    config = LensConfig(
        n_layers=int(cfg.n_layers),
        n_heads=int(cfg.n_heads),
        n_kv_heads=int(getattr(cfg, "n_key_value_heads", None) or cfg.n_heads),
        d_model=int(cfg.d_model),
        d_head=int(cfg.d_head),
        bidirectional=getattr(cfg, "attention_dir", "causal") == "bidirectional",
        positional_embedding_type=str(getattr(cfg, "positional_embedding_type", "standard")),
        original_architecture=getattr(cfg, "original_architecture", None),
    )
    state = _weights(model, config.n_kv_heads != config.n_heads)
    if any(t.is_meta for t in state.values()):
        raise InputError(f"in-memory {kind}: its weights are on the meta device; load real weights first")
    name = getattr(cfg, "model_name", None) or kind
    return WeightSource(
        model_id=str(name),
        description=f"in-memory {kind} {name}",
        config=config,
        names=state,
        load=lambda tensor: state[tensor].detach(),
        n_params=sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()),
    )
