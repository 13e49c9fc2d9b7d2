"""Decoders that normalise q and k after the projection: the score is a form up to per-token scalars.

Query/key normalisation (an RMSNorm or LayerNorm over the whole projection or over each head) makes
the score not one bilinear form of the layer input: q·k = s_q(x_i) s_k(x_j) (x_i W_q' + b_q')(x_j W_k' + b_k')ᵀ
(+ the LayerNorm bias terms), with positive scalars s that depend on the token (and, for per-head
norms, the head). Decision: score the form these models use up to those scalars: the norm's gain (and
LayerNorm's centring) folded into W_q and W_k, the ``form`` column saying so; a LayerNorm's additive
bias goes to ``left_out``. The scores then describe the direction-only geometry of q·k, not its raw
magnitude.

- RMSNorm over H·d_h: OLMo2, OLMoE. RMSNorm per head: Qwen3, Qwen3-MoE, EXAONE 4, Gemma 3 (whose gain
  is 1 + weight).
- LayerNorm per head: Phi (shared gains, with bias), Persimmon (shared, with bias), Cohere and StableLM
  (one gain vector per head, no bias).
- L2 norm per head without gains: Llama 4's rotary layers (its NoPE layers are not normalised).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from . import gpt_lineage
from .base import Architecture, AttentionLayer, TensorReader
from .decoders import decoder_architecture, heads_of, llama_layers, rotary_terms, uses_rope, window

if TYPE_CHECKING:
    from transformers import PretrainedConfig

QK_NORM_WHOLE = "qk_norm over all heads: W_q diag(g_q) (W_k diag(g_k))ᵀ, up to per-token scalars"
QK_NORM_PER_HEAD = "qk_norm per head: W_q diag(g_q) (W_k diag(g_k))ᵀ, up to per-token-and-head scalars"
QK_L2NORM = "qk_l2norm per head: W_q W_kᵀ (no gains), up to per-token-and-head scalars"
QK_LAYERNORM = (
    "qk_layernorm per head: W_q C diag(g_q) (W_k C diag(g_k))ᵀ, C centring, up to per-token-and-head scalars"
)


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


def _rms_normalised(
    layers: Iterator[AttentionLayer], reader: TensorReader, prefix: str = "", gain_offset: float = 0.0
) -> Iterator[AttentionLayer]:
    """Each layer's ``q_norm`` / ``k_norm`` RMSNorm gains (plus ``gain_offset``) folded in; the offset is
    added in float64 (Gemma 3's 1 + w rounded in a bf16 checkpoint's dtype would lose up to 2⁻⁹)."""
    for layer in layers:
        attention = f"{prefix}layers.{layer.layer}.self_attn"
        q_gain = reader.get(f"{attention}.q_norm.weight").double() + gain_offset
        k_gain = reader.get(f"{attention}.k_norm.weight").double() + gain_offset
        form = QK_NORM_PER_HEAD if q_gain.numel() == layer.head_dim else QK_NORM_WHOLE
        yield normalised(layer, q_gain, k_gain, form)


def _clip(config: PretrainedConfig) -> tuple[str, ...]:
    return ("clip_qkv",) if getattr(config, "clip_qkv", None) is not None else ()


def _qk_norm_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """OLMo2 / OLMoE (RMSNorm over H·d_h; OLMoE may clamp after it), Qwen3 / Qwen3-MoE (RMSNorm per head)."""
    clip = _clip(config)
    return _rms_normalised(llama_layers(config, reader, lambda c, i: rotary_terms(c, i) + clip), reader)


def _exaone4_terms(config: PretrainedConfig, i: int) -> tuple[str, ...]:
    """EXAONE 4: with a sliding window configured, only the local layers are rotary (global ones NoPE)."""
    local = window(config, i)
    rotary = getattr(config, "sliding_window", None) is None or bool(local)
    return (("rotary",) if rotary else ()) + ("scale",) + local


def _exaone4_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return _rms_normalised(llama_layers(config, reader, _exaone4_terms), reader)


def gemma3_text_layers(
    config: PretrainedConfig, reader: TensorReader, prefix: str = ""
) -> Iterator[AttentionLayer]:
    """Gemma 3: per-head RMSNorm with gain 1 + weight; query_pre_attn_scalar scale; local layers windowed.

    EmbeddingGemma (``use_bidirectional_attention``) is the same network without the causal mask: its
    stack is ``encoder``.
    """
    softcap = ("attn_logit_softcapping",) if getattr(config, "attn_logit_softcapping", None) else ()

    def terms(c: PretrainedConfig, i: int) -> tuple[str, ...]:
        return ("rotary", "query_pre_attn_scalar") + softcap + window(c, i)

    stack = "encoder" if getattr(config, "use_bidirectional_attention", False) else "decoder"
    layers = (replace(layer, stack=stack) for layer in llama_layers(config, reader, terms, prefix))
    return _rms_normalised(layers, reader, prefix, gain_offset=1.0)


def llama4_text_layers(
    config: PretrainedConfig, reader: TensorReader, prefix: str = ""
) -> Iterator[AttentionLayer]:
    """Llama 4: rotary layers attend within chunks and L2-normalise q and k per head (``use_qk_norm``);
    the NoPE layers (``no_rope_layers[i] == 0``) scale q by a per-position temperature instead."""
    temperature = ("attn_temperature_tuning",) if config.attn_temperature_tuning else ()

    def terms(c: PretrainedConfig, i: int) -> tuple[str, ...]:
        return rotary_terms(c, i) + (() if uses_rope(c, i) else temperature)

    for layer in llama_layers(config, reader, terms, prefix):
        if config.use_qk_norm and uses_rope(config, layer.layer):
            layer = replace(layer, form=QK_L2NORM)
        yield layer


def _per_head_layernorm(
    layers: Iterator[AttentionLayer], reader: TensorReader, q_norm: str, k_norm: str
) -> Iterator[AttentionLayer]:
    """LayerNorm per head without bias, one gain vector per head (``{q,k}_norm``: names with ``{i}``)."""
    for layer in layers:
        q_gain, k_gain = reader.get(q_norm.format(i=layer.layer)), reader.get(k_norm.format(i=layer.layer))
        yield normalised(layer, q_gain.flatten(), k_gain.flatten(), QK_LAYERNORM, centre=True)


def _cohere_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Cohere (Command-R): optional ``use_qk_norm``, a LayerNorm over each head with gains of shape (H, d_h)."""
    layers = llama_layers(config, reader)
    if not getattr(config, "use_qk_norm", False):
        return layers
    norm = "layers.{i}.self_attn.%s_norm.weight"
    return _per_head_layernorm(layers, reader, norm % "q", norm % "k")


def _stacked_gains(reader: TensorReader, name: str, heads: int) -> torch.Tensor:
    """StableLM's per-head LayerNorms ``{name}.norms.{h}.weight``, concatenated head after head."""
    return torch.cat([reader.get(f"{name}.norms.{h}.weight") for h in range(heads)])


def _stablelm_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """StableLM: partial rotary; optional ``qk_layernorm``, one bias-free LayerNorm per head."""
    for layer in llama_layers(config, reader):
        if getattr(config, "qk_layernorm", False):
            attention = f"layers.{layer.layer}.self_attn"
            q_gain = _stacked_gains(reader, f"{attention}.q_layernorm", layer.n_heads)
            k_gain = _stacked_gains(reader, f"{attention}.k_layernorm", layer.n_kv_heads)
            layer = normalised(layer, q_gain, k_gain, QK_LAYERNORM, centre=True)
        yield layer


def _layernorm_shared(
    layer: AttentionLayer, reader: TensorReader, q_name: str, k_name: str
) -> AttentionLayer:
    """One LayerNorm (gain and bias) over d_h shared by the heads: Phi's and Persimmon's ``qk_layernorm``."""
    q_gain, k_gain = reader.get(f"{q_name}.weight"), reader.get(f"{k_name}.weight")
    return normalised(layer, q_gain, k_gain, QK_LAYERNORM, centre=True, norm_bias=True)


def _phi_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Phi-1/1.5/2: biased q_proj/k_proj, partial rotary, optional per-head LayerNorm of q and k."""
    for layer in llama_layers(config, reader):
        if getattr(config, "qk_layernorm", False):
            attention = f"layers.{layer.layer}.self_attn"
            layer = _layernorm_shared(layer, reader, f"{attention}.q_layernorm", f"{attention}.k_layernorm")
        yield layer


def _persimmon_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Persimmon / Fuyu's decoder: fused ``query_key_value`` rows per head [q_h k_h v_h], partial rotary,
    ``qk_layernorm`` (on by default) with gain and bias shared by the heads."""
    heads, _, head_dim = heads_of(config)
    fused = gpt_lineage.fused_rows_layers(
        reader,
        "layers.{i}.self_attn.query_key_value",
        config.num_hidden_layers,
        heads,
        head_dim,
        True,
        ("rotary", "scale"),
    )
    for layer in fused:
        if config.qk_layernorm:
            attention = f"layers.{layer.layer}.self_attn"
            layer = _layernorm_shared(layer, reader, f"{attention}.q_layernorm", f"{attention}.k_layernorm")
        yield layer


ARCHITECTURES: list[Architecture] = [
    decoder_architecture(
        ("olmo2", "qwen3", "olmoe", "qwen3_moe"),
        _qk_norm_layers,
        "q/k RMSNorm gains folded (non-standard form); MoE variants share the dense attention",
    ),
    decoder_architecture(
        ("exaone4",), _exaone4_layers, "per-head q/k RMSNorm folded; global layers NoPE when windowed"
    ),
    decoder_architecture(
        ("gemma3_text",),
        gemma3_text_layers,
        "per-head q/k RMSNorm (gain 1 + w) folded; local layers windowed; query_pre_attn_scalar",
    ),
    decoder_architecture(
        ("llama4_text",),
        llama4_text_layers,
        "rotary layers: chunked, q/k L2-normalised per head; NoPE layers: temperature-scaled q",
    ),
    decoder_architecture(
        ("phi",), _phi_layers, "biased q_proj/k_proj; qk_layernorm folded (non-standard form)"
    ),
    decoder_architecture(
        ("cohere",), _cohere_layers, "Llama layout; per-head q/k LayerNorm folded (use_qk_norm)"
    ),
    decoder_architecture(
        ("stablelm",), _stablelm_layers, "partial rotary; per-head q/k LayerNorm folded (qk_layernorm)"
    ),
    decoder_architecture(
        ("persimmon",),
        _persimmon_layers,
        "fused rows per head [q_h k_h v_h]; q/k LayerNorm folded, its bias left out",
    ),
]
