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
ones after ``enable_compatibility_mode``. A HookedTransformer whose q and k are normalised per head after
their projection (``use_qk_norm``) has no form in W_Q and W_K alone and is refused. A bridge is read from
what its blocks hold, not from its ``cfg`` (which leaves ``use_qk_norm`` False for Qwen3 and calls BERT
causal): per-head ``q_norm``/``k_norm`` in a block's attention are probed and their gains folded in as
discovery folds them; the labels are those attngeom gives the wrapped model's type; a bridge whose layers
are not one list of attention blocks (an encoder-decoder's ``encoder_blocks``/``decoder_blocks``, a hybrid's
Mamba ``mixer``) is refused in one line naming what it holds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from ..errors import InputError
from .base import WeightSource

if TYPE_CHECKING:
    from ..architectures.qk_norms import Norm

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
    """A ``HookedTransformer`` or a ``TransformerBridge``: TransformerLens' objects with ``cfg`` and ``blocks``
    (a bridge of any layout: one without ``blocks`` is refused when read)."""
    if _library(model) != "transformer_lens" or not hasattr(model, "cfg"):
        return False
    return hasattr(model, "blocks") or _bridged(model)


def _bridged(model: object) -> bool:
    """A ``TransformerBridge``: the transformers model it wraps is its ``original_model``."""
    return "original_model" in vars(model)


def _weights(model: torch.nn.Module, grouped: bool, norm: Norm | None) -> dict[str, torch.Tensor]:
    """W_Q and W_K of every block by their HookedTransformer names: a HookedTransformer's parameters, a
    bridge's per-block properties (computed from the wrapped model's q/k weights) and, with ``norm``, the
    gains of its q/k norms (``blocks.{i}.attn.q_norm.gain``)."""
    if not _bridged(model):
        return dict(model.named_parameters(remove_duplicate=False))
    key = "_W_K" if grouped else "W_K"
    weights = {}
    for i, block in enumerate(model.blocks):
        weights[f"blocks.{i}.attn.W_Q"] = block.attn.W_Q
        weights[f"blocks.{i}.attn.{key}"] = block.attn.W_K
        for name in ("q_norm", "k_norm") if norm is not None else ():
            weight = _inner(getattr(block.attn, name)).weight.detach()
            weights[f"blocks.{i}.attn.{name}.gain"] = weight + norm.offset
    return weights


def _inner(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers module a bridge component wraps (``_original_component``), else itself."""
    inner = getattr(module, "_original_component", None)
    return inner if isinstance(inner, torch.nn.Module) else module


def _wrapped_type(model: object) -> str:
    """The ``model_type`` of the transformers model a bridge wraps ("" where it holds none)."""
    config = getattr(getattr(model, "original_model", None), "config", None)
    return str(getattr(config, "model_type", "") or "")


def _bridge_blocks(model: torch.nn.Module, kind: str) -> None:
    """Refuse, in one line, a bridge whose layers attngeom cannot read as ``blocks[i].attn``."""
    wrapped = _wrapped_type(model) or "its model"
    alternative = "score the transformers model it wraps (bridge.original_model) or its checkpoint instead"
    blocks = getattr(model, "blocks", None) if "blocks" in dict(model.named_children()) else None
    if blocks is None:
        lists = [n for n, _ in model.named_children() if n.endswith("blocks")]
        held = f"its layers are {' and '.join(lists)}" if lists else "it has no blocks"
        raise InputError(
            f"in-memory {kind} of {wrapped}: {held}, not one list of attention blocks; {alternative}"
        )
    for i, block in enumerate(blocks):
        if "attn" not in dict(block.named_children()):
            mixer = next(
                (
                    c
                    for n, c in block.named_children()
                    if n not in ("ln1", "ln2", "mlp") and not n.startswith(("hook_", "_"))
                ),
                None,
            )
            what = f"a {type(_inner(mixer)).__name__}" if mixer is not None else "no attention"
            raise InputError(
                f"in-memory {kind} of {wrapped}: block {i} holds {what}, not an attention (a hybrid); "
                f"{alternative}"
            )


def _bridge_norm(model: torch.nn.Module, kind: str) -> Norm | None:
    """The kind of the per-head q/k norms the bridge's attention blocks hold (``q_norm``/``k_norm``: Qwen3's
    RMSNorm), probed on the transformers module each wraps; None where they hold none. A norm discovery
    could not fold, or blocks that differ in it, are refused in one line."""
    from ..architectures.qk_norms import probe_norm

    found: set[Norm | None] = set()
    for i, block in enumerate(model.blocks):
        children = dict(block.attn.named_children())
        if "q_norm" not in children and "k_norm" not in children:
            found.add(None)
            continue
        norms = [probe_norm(_inner(children[n]), n) if n in children else None for n in ("q_norm", "k_norm")]
        q, k = norms
        if q is None or k is None or (q.offset, q.centre, q.bias) != (k.offset, k.centre, k.bias) or q.bias:
            raise InputError(
                f"in-memory {kind} of {_wrapped_type(model) or 'its model'}: block {i}'s q/k norms are of a "
                "kind attngeom does not fold; score the transformers model it wraps (bridge.original_model)"
            )
        found.add(replace(q, name="q_norm"))
    if len(found) > 1:
        raise InputError(f"in-memory {kind}: its blocks differ in whether they normalise q and k")
    return found.pop() if found else None


def _bidirectional(cfg: object, wrapped: str) -> bool:
    """Whether the model attends both ways: as attngeom labels the type a bridge wraps (BERT: bidirectional,
    whatever the bridge's ``attention_dir`` says), else as the ``cfg``'s ``attention_dir`` says."""
    from ..architectures.registry import labels_of

    labels = labels_of(wrapped) if wrapped else None
    if labels is not None:
        return labels[1] == "bidirectional"
    return getattr(cfg, "attention_dir", "causal") == "bidirectional"


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
    qk_norm: str = ""
    """"rms" or "layer" where the blocks normalise q and k per head (``blocks.{i}.attn.q_norm.gain``)."""
    wrapped_type: str = ""
    """The ``model_type`` of the transformers model a bridge wraps."""

    @property
    def use_bidirectional_attention(self) -> bool:  # read by Architecture.objective_of
        return self.bidirectional

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def from_hooked_transformer(model: torch.nn.Module) -> WeightSource:
    """A HookedTransformer's (or a TransformerBridge's) W_Q/W_K by their names (``blocks.{i}.attn.W_Q``)."""
    cfg = model.cfg
    kind = type(model).__name__
    bridged = _bridged(model)
    if bridged:
        _bridge_blocks(model, kind)
    norm = _bridge_norm(model, kind) if bridged else None
    if not bridged and getattr(cfg, "use_qk_norm", False):
        raise InputError(
            f"in-memory {kind}: q and k are normalised per head after W_Q/W_K (use_qk_norm), which W_Q and "
            "W_K alone do not state; score the transformers model or its checkpoint instead"
        )
    wrapped = _wrapped_type(model) if bridged else ""
    config = LensConfig(
        n_layers=int(cfg.n_layers),
        n_heads=int(cfg.n_heads),
        n_kv_heads=int(getattr(cfg, "n_key_value_heads", None) or cfg.n_heads),
        d_model=int(cfg.d_model),
        d_head=int(cfg.d_head),
        bidirectional=_bidirectional(cfg, wrapped),
        positional_embedding_type=str(getattr(cfg, "positional_embedding_type", "standard")),
        original_architecture=getattr(cfg, "original_architecture", None),
        qk_norm="" if norm is None else ("layer" if norm.centre else "rms"),
        wrapped_type=wrapped,
    )
    state = _weights(model, config.n_kv_heads != config.n_heads, norm)
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
