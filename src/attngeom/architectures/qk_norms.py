"""q/k norms beside an attention's projections, probed on a CPU copy: what discovery folds into W_q, W_k.

A norm's kind is read off its behaviour, not its class: is its gain ``w`` or ``1 + w``, does it centre
(LayerNorm) or not (RMS), does it add a bias, or has it no gain at all.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch

from .base import ArchitectureError, AttentionLayer

NORMS = (
    ("q_norm", "k_norm"),
    ("q_layernorm", "k_layernorm"),
    ("query_layernorm", "key_layernorm"),
    ("qk_norm", "qk_norm"),
)
"""Child names of q/k norms applied after the projections."""
QK_NORM_WHOLE = "qk_norm over all heads: W_q diag(g_q) (W_k diag(g_k))ᵀ, up to per-token scalars"
QK_NORM_PER_HEAD = "qk_norm per head: W_q diag(g_q) (W_k diag(g_k))ᵀ, up to per-token-and-head scalars"
QK_L2NORM = "qk_l2norm per head: W_q W_kᵀ (no gains), up to per-token-and-head scalars"
QK_LAYERNORM = (
    "qk_layernorm per head: W_q C diag(g_q) (W_k C diag(g_k))ᵀ, C centring, up to per-token-and-head scalars"
)


@dataclass(frozen=True)
class Norm:
    """A q or k norm: the gain is ``weight + offset``; ``centre`` for a LayerNorm; ``bias`` if it adds one."""

    name: str
    offset: float
    centre: bool
    bias: bool
    weight: bool = True
    """False for a norm without a gain (Muse Spark's shared ``qk_norm``): the gain is 1."""


def probe_norm(norm: torch.nn.Module, name: str, width: int = 0) -> Norm | None:
    """How ``norm`` scales: run a CPU copy with weight 0 (gain ``w``: output 0) and with weight set to
    give gain 1 (a LayerNorm centres its output). ``None`` when it is not an elementwise-gain norm.
    A norm without a weight is run on ``width``-wide rows."""
    weight = getattr(norm, "weight", None)
    if weight is None and width and not list(norm.parameters()):
        return _probe_plain(norm, name, width)
    if not isinstance(weight, torch.Tensor) or weight.dim() not in (1, 2):
        return None  # 2: a gain per head (Chameleon's heads × head width LayerNorm)
    probe = copy.deepcopy(norm).to_empty(device="cpu").float()
    bias = getattr(probe, "bias", None)
    x = torch.randn(3, *weight.shape, generator=torch.Generator().manual_seed(0)) + 2.0
    with torch.no_grad():
        if isinstance(bias, torch.Tensor):
            bias.zero_()
        probe.weight.zero_()
        at_zero = probe(x)
        offset = 0.0 if at_zero.abs().max() < 1e-6 else 1.0
        probe.weight.fill_(1.0 - offset)
        at_one = probe(x)
    if offset and (probe(x) - at_zero).abs().max() > 1e-6:
        return None
    centre = bool(at_one.mean(-1).abs().max() < 1e-4)
    if weight.dim() == 2 and not _per_row(x, at_one, centre):
        return None  # a norm over all heads with a gain per head: not a per-head norm
    return Norm(name, offset, centre, isinstance(bias, torch.Tensor))


def _per_row(x: torch.Tensor, y: torch.Tensor, centre: bool) -> bool:
    """Whether ``y`` is ``x`` normalised row by row (last axis), centred (LayerNorm) or not (RMS), up to
    the norm's epsilon."""
    base = x - x.mean(-1, keepdim=True) if centre else x
    scale = base.pow(2).mean(-1, keepdim=True).rsqrt()
    return bool((y - base * scale).abs().max() < 1e-3)


def _probe_plain(norm: torch.nn.Module, name: str, width: int) -> Norm | None:
    """A gain-free norm: its output a positive multiple of each row (RMS) or of the centred row (LayerNorm)."""
    x = torch.randn(3, width, generator=torch.Generator().manual_seed(0)) + 2.0
    with torch.no_grad():
        y = norm(x)
    for centre, base in ((False, x), (True, x - x.mean(-1, keepdim=True))):
        c = (y * base).sum(-1, keepdim=True) / (base * base).sum(-1, keepdim=True)
        if (c > 0).all() and (y - c * base).abs().max() < 1e-4 * y.abs().max():
            return Norm(name, 0.0, centre, False, weight=False)
    return None


def _input_side(norms: tuple, projections: tuple) -> bool:
    """Whether the norms read the projections' input rather than their output: one is as wide as its
    projection's input and not as its output (BLT's cross attention normalises its hidden states)."""
    for norm, projection in zip(norms, projections, strict=True):
        size = getattr(getattr(norm, "weight", None), "shape", (None,))[0]
        if (
            isinstance(projection, torch.nn.Linear)
            and size == projection.in_features != projection.out_features
        ):
            return True
    return False


def qk_norms(module: torch.nn.Module, width: int, projections: tuple = ()) -> tuple[Norm | None, Norm | None]:
    """The q and k norms applied after ``projections`` (q's, k's), probed; none where there are none or
    where they normalise the projections' input (left out, as a layer's input norm is)."""
    for q_name, k_name in NORMS:
        q_norm, k_norm = getattr(module, q_name, None), getattr(module, k_name, None)
        if isinstance(q_norm, torch.nn.Identity) and isinstance(k_norm, torch.nn.Identity):
            return None, None  # a family whose q/k norm is switched off in this config
        if projections and _input_side((q_norm, k_norm), projections):
            return None, None
        if isinstance(q_norm, torch.nn.Module) and isinstance(k_norm, torch.nn.Module):
            q, k = probe_norm(q_norm, q_name, width), probe_norm(k_norm, k_name, width)
            if q is None or k is None:
                raise ArchitectureError(f"{type(module).__name__}: q/k norm {q_name} of unknown kind")
            return q, k
    return None, None


QUERY_SCALES = ("scaling", "per_dim_scale")
"""Names of an attention's own learned per-dimension query scale (TimesFM, VideoPrism's pooling head)."""


def query_scale(module: torch.nn.Module, head_dim: int) -> str:
    """The name of the attention's learned per-dimension query scale, a ``head_dim``-wide parameter of
    its own that multiplies q as softplus(scale) (its constant factor is a positive scalar, no part of
    the form), else "": a fixed diagonal map after W_q, folded into it (the conformance check confirms
    the convention on the model's own q)."""
    for name in QUERY_SCALES:
        scale = getattr(module, name, None)
        if isinstance(scale, torch.nn.Parameter) and scale.shape == (head_dim,):
            return name
    return ""


def rope_key_norm(module: torch.nn.Module) -> Norm | None:
    """The RMS norm a latent attention applies to its shared rotary key alone (Dots 3's
    ``k_rope_only_layernorm``): a child named for the rotary part and a norm; its gain is folded into
    the rotary key projection."""
    for name, child in module.named_children():
        if "rope" in name and "norm" in name:
            norm = probe_norm(child, name)
            if norm is None or norm.centre or norm.bias:
                raise ArchitectureError(f"{type(module).__name__}: rotary key norm {name} of unknown kind")
            return norm
    return None


def _fold_norm(
    w: torch.Tensor | None, gain: torch.Tensor, heads: int, head_dim: int, centre: bool, whole: bool = False
) -> torch.Tensor | None:
    """``w`` (… × H·d_h) times diag(gain), after centring each head's columns when the norm is a LayerNorm
    (``whole``: all H·d_h columns together, a LayerNorm over the whole projection).

    ``gain`` has d_h entries (one norm shared by the heads) or H·d_h (one norm over the whole projection,
    or one gain vector per head).
    """
    if w is None:
        return None
    dtype = torch.promote_types(w.dtype, torch.float32)
    shaped = w.to(dtype).reshape(*w.shape[:-1], heads, head_dim)
    if centre:
        shaped = shaped - shaped.mean((-2, -1) if whole else -1, keepdim=True)
    return (shaped * gain.to(dtype).reshape(-1, head_dim)).reshape(w.shape)


def normalised(
    layer: AttentionLayer,
    q_gain: torch.Tensor,
    k_gain: torch.Tensor,
    form: str,
    centre: bool = False,
    norm_bias: bool = False,
    whole: bool = False,
) -> AttentionLayer:
    """``layer`` with the q/k norm gains (and LayerNorm centring) folded into W_q, W_k and the biases.

    ``norm_bias``: the LayerNorm adds a bias after the gain, a term outside the form (``qk_norm_bias``).
    ``whole``: the LayerNorm centres the whole projection (ESM C's), not each head.
    """
    d_h = layer.head_dim
    return replace(
        layer,
        w_q=_fold_norm(layer.w_q, q_gain, layer.n_heads, d_h, centre, whole),
        w_k=_fold_norm(layer.w_k, k_gain, layer.n_kv_heads, d_h, centre, whole),
        b_q=_fold_norm(layer.b_q, q_gain, layer.n_heads, d_h, centre, whole),
        b_k=_fold_norm(layer.b_k, k_gain, layer.n_kv_heads, d_h, centre, whole),
        left_out=layer.left_out + (("qk_norm_bias",) if norm_bias else ()),
        form=form,
    )
