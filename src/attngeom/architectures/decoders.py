"""Autoregressive (decoder-only) language models with rotary position embeddings.

Most families share Llama's layout (``layers.{i}.self_attn.q_proj`` / ``k_proj``, optional biases,
grouped-query attention, ``head_dim`` from the config): Llama 2/3, Mistral, Mixtral, Qwen2, Gemma,
Gemma2, Phi-1/1.5/2, OLMo and MobileLLM. Phi-3 fuses [q | k | v] into ``qkv_proj``.

Query/key normalisation (OLMo2's RMSNorm over the whole projection, Qwen3's per-head RMSNorm,
Phi's optional per-head ``qk_layernorm``) makes the score not one bilinear form of the layer input:
q·k = s_q(x_i) s_k(x_j) (x_i W_q' + b_q')(x_j W_k' + b_k')ᵀ (+ the LayerNorm bias terms), with
positive scalars s that depend on the token (and, for per-head norms, the head). Decision: score the
form these models use up to those scalars: the norm's gain (and LayerNorm's centring) folded into
W_q and W_k, the ``form`` column saying so; LayerNorm's additive bias goes to ``left_out``. The
scores then describe the direction-only geometry of q·k, not its raw magnitude.

MobileLLM (``model_type`` "mobilellm", shipped with remote code) is Llama's layout: its config is
read as a ``LlamaConfig`` without running that code (see ``LLAMA_LAYOUT_REMOTE_CODE``). Each stored
block is scored once, also where ``layer_sharing`` runs a block twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import torch
from transformers import PretrainedConfig

from .base import Architecture, AttentionLayer, LayersFn, TensorReader, head_dim_of, linear, separate_layers

LLAMA_LAYOUT_REMOTE_CODE = ("mobilellm",)
"""Remote-code model types whose config.json is read as a LlamaConfig (trust_remote_code stays off)."""

ROTARY = ("rotary", "scale")


def _heads(config: PretrainedConfig) -> tuple[int, int, int]:
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return heads, kv_heads, head_dim_of(config, heads)


def _llama_layers(
    config: PretrainedConfig, reader: TensorReader, left_out: tuple[str, ...] = ROTARY
) -> Iterator[AttentionLayer]:
    """Separate ``q_proj`` / ``k_proj`` (biases where the checkpoint has them)."""
    _, kv_heads, head_dim = _heads(config)
    return separate_layers(
        config,
        reader,
        "layers.{i}.self_attn",
        "q_proj",
        "k_proj",
        stack="decoder",
        left_out=left_out,
        bias=reader.has("layers.0.self_attn.q_proj.bias"),
        n_kv_heads=kv_heads,
        head_dim=head_dim,
    )


def _gemma2_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Gemma2 scales by query_pre_attn_scalar^-½ (not head_dim^-½) and may soft-cap the logits."""
    softcap = ("attn_logit_softcapping",) if getattr(config, "attn_logit_softcapping", None) else ()
    return _llama_layers(config, reader, ("rotary", "query_pre_attn_scalar") + softcap)


def _olmo_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """OLMo may clamp q, k and v to ±clip_qkv after the projection."""
    clip = ("clip_qkv",) if getattr(config, "clip_qkv", None) is not None else ()
    return _llama_layers(config, reader, ROTARY + clip)


def _phi3_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Phi-3's fused ``qkv_proj``: output rows [q (H·d_h) | k (H_kv·d_h) | v]."""
    heads, kv_heads, head_dim = _heads(config)
    q_end, k_end = heads * head_dim, (heads + kv_heads) * head_dim
    for i in range(config.num_hidden_layers):
        w_qkv = linear(reader.get(f"layers.{i}.self_attn.qkv_proj.weight"))
        yield AttentionLayer(
            stack="decoder",
            layer=i,
            w_q=w_qkv[:, :q_end],
            w_k=w_qkv[:, q_end:k_end],
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=ROTARY,
        )


def _fold_norm(
    w: torch.Tensor | None, gain: torch.Tensor, heads: int, head_dim: int, centre: bool
) -> torch.Tensor | None:
    """``w`` (… × H·d_h) times diag(gain), after centring each head's columns when the norm is a LayerNorm.

    ``gain`` has d_h entries (one norm shared by the heads) or H·d_h (one norm over the whole projection).
    """
    if w is None:
        return None
    dtype = torch.promote_types(w.dtype, torch.float32)
    shaped = w.to(dtype).reshape(*w.shape[:-1], heads, head_dim)
    if centre:
        shaped = shaped - shaped.mean(-1, keepdim=True)
    return (shaped * gain.to(dtype).reshape(-1, head_dim)).reshape(w.shape)


def _normalised(
    layer: AttentionLayer, q_gain: torch.Tensor, k_gain: torch.Tensor, form: str, layernorm: bool = False
) -> AttentionLayer:
    """``layer`` with the q/k norm gains (and LayerNorm centring) folded into W_q, W_k and the biases."""
    d_h = layer.head_dim
    return replace(
        layer,
        w_q=_fold_norm(layer.w_q, q_gain, layer.n_heads, d_h, layernorm),
        w_k=_fold_norm(layer.w_k, k_gain, layer.n_kv_heads, d_h, layernorm),
        b_q=_fold_norm(layer.b_q, q_gain, layer.n_heads, d_h, layernorm),
        b_k=_fold_norm(layer.b_k, k_gain, layer.n_kv_heads, d_h, layernorm),
        left_out=layer.left_out + (("qk_norm_bias",) if layernorm else ()),
        form=form,
    )


QK_NORM_WHOLE = "qk_norm over all heads: W_q diag(g_q) (W_k diag(g_k))ᵀ, up to per-token scalars"
QK_NORM_PER_HEAD = "qk_norm per head: W_q diag(g_q) (W_k diag(g_k))ᵀ, up to per-token-and-head scalars"
QK_LAYERNORM = (
    "qk_layernorm per head: W_q C diag(g_q) (W_k C diag(g_k))ᵀ, C centring, up to per-token-and-head scalars"
)


def _qk_norm_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """OLMo2 (RMSNorm over H·d_h) and Qwen3 (RMSNorm over each head's d_h) normalise q and k."""
    for layer in _llama_layers(config, reader):
        prefix = f"layers.{layer.layer}.self_attn"
        q_gain, k_gain = reader.get(f"{prefix}.q_norm.weight"), reader.get(f"{prefix}.k_norm.weight")
        form = QK_NORM_PER_HEAD if q_gain.numel() == layer.head_dim else QK_NORM_WHOLE
        yield _normalised(layer, q_gain, k_gain, form)


def _phi_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Phi-1/1.5/2: biased q_proj/k_proj, partial rotary, optional per-head LayerNorm of q and k."""
    for layer in _llama_layers(config, reader):
        if getattr(config, "qk_layernorm", False):
            prefix = f"layers.{layer.layer}.self_attn"
            q_gain, k_gain = (
                reader.get(f"{prefix}.q_layernorm.weight"),
                reader.get(f"{prefix}.k_layernorm.weight"),
            )
            layer = _normalised(layer, q_gain, k_gain, QK_LAYERNORM, layernorm=True)
        yield layer


def _decoder(model_types: tuple[str, ...], layers: LayersFn, notes: str = "") -> Architecture:
    return Architecture(
        model_types=model_types,
        modality="language",
        objective="autoregressive",
        layers=layers,
        n_layers=lambda c: c.num_hidden_layers,
        notes=notes,
        stacks=("decoder",),
    )


LLAMA = _decoder(
    ("llama", "mistral", "mixtral", "qwen2", "gemma") + LLAMA_LAYOUT_REMOTE_CODE,
    _llama_layers,
    "q_proj/k_proj; GQA; head_dim from the config (Gemma MQA)",
)
GEMMA2 = _decoder(
    ("gemma2",), _gemma2_layers, "Llama layout; query_pre_attn_scalar and soft-capping left out"
)
OLMO = _decoder(("olmo",), _olmo_layers, "Llama layout; clip_qkv left out")
PHI = _decoder(("phi",), _phi_layers, "biased q_proj/k_proj; qk_layernorm folded (non-standard form)")
PHI3 = _decoder(("phi3",), _phi3_layers, "fused qkv_proj [q|k|v]")
QK_NORM = _decoder(("olmo2", "qwen3"), _qk_norm_layers, "q/k RMSNorm gains folded (non-standard form)")

ARCHITECTURES: list[Architecture] = [LLAMA, GEMMA2, OLMO, PHI, PHI3, QK_NORM]
