"""Multi-head latent attention (DeepSeek-V2/V3, and the types discovery finds with it): q and k through
low-rank, RMS-normalised latents. Read by the DeepSeek-V2 table (``tables.latent``) and by discovery alike.

Per head h the score is a content part plus a rotary part, each a bilinear form of x up to per-token
scalars (the RMS norms' 1/rms factors s_q(x), s_kv(x)):

- content (stack ``decoder``): q_h·k_h = s_q(x) s_kv(y) (x W_q,h + b_q,h)(y W_k,h + b_k,h)ᵀ with
  W_q,h = W_qa diag(g_q) W_qb,nope,h and W_k,h = W_kva diag(g_kv) W_kvb,k,h
  (W_q,h = W_q,nope,h when there is no query latent, as in DeepSeek-V2-Lite; then s_q = 1);
- rotary (stack ``decoder_rope``): s_q(x) (x W_qa diag(g_q) W_qb,rope,h + b)(y W_kva,rope + b)ᵀ with one
  key shared by all heads (n_kv_heads = 1), rotary applied on top.

The two parts carry different per-token scalars, so they are scored as separate stacks, never summed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from .base import ArchitectureError, AttentionLayer, TensorReader, linear

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from .qk_norms import Norm

CONTENT_FORM = "mla_content: W_qa diag(g_q) W_qb,nope,h (W_kva diag(g_kv) W_kvb,k,h)ᵀ up to per-token scalars"
ROPE_FORM = "mla_rope: W_qa diag(g_q) W_qb,rope,h W_kva,ropeᵀ up to per-token scalars, one shared rope key"
ROPE_NORM_FORM = (
    "mla_rope: W_qa diag(g_q) W_qb,rope,h (W_kva,rope diag(g_kr))ᵀ up to per-token scalars, one shared rope "
    "key RMS-normalised on its own"
)


def _heads_rows(weight: torch.Tensor, heads: int, per_head: int, keep: slice) -> torch.Tensor:
    """Rows ``keep`` of every head of an nn.Linear weight laid out head-major, per_head rows per head."""
    return weight.unflatten(0, (heads, per_head))[:, keep].flatten(0, 1)


def _query(
    q_a: torch.Tensor | None,
    b_latent: torch.Tensor | None,
    q_b: torch.Tensor,
    heads: int,
    qk_dim: int,
    keep: slice,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """W_q (and b_q) of the query dims ``keep`` of every head: W_qa diag(g_q) W_qb,keep, or W_q,keep."""
    w = linear(_heads_rows(q_b, heads, qk_dim, keep))
    if q_a is None:
        return w, None
    return q_a @ w, (b_latent @ w if b_latent is not None else None)


def latent_query(module: torch.nn.Module, q: str) -> None:
    """Refuse a latent attention (``module``, its query's first projection ``q``) whose query latent no
    ``q_b_proj`` maps alone: AXK2's ``q_gate_proj`` reads the RMS-normalised latent and the raw one side
    by side, so q is a per-token-scaled map of x plus an unscaled one, not the form up to a scalar."""
    up = getattr(module, "q_b_proj", None)
    rank = module.q_a_proj.out_features if q == "q_a_proj" else None
    if rank is None or (isinstance(up, torch.nn.Linear) and up.in_features == rank):
        return
    wider = [
        f"`{n}` reads {c.in_features}"
        for n, c in module.named_children()
        if isinstance(c, torch.nn.Linear) and n.startswith("q") and n != q
    ]
    raise ArchitectureError(
        f"{type(module).__name__}: no q_b_proj maps the {rank}-wide query latent alone "
        f"({', '.join(wider) or 'none reads it'}): q is read from more than the latent, which the "
        "latent attention's form does not state"
    )


def mla_layer(
    config: PretrainedConfig,
    reader: TensorReader,
    p: str,
    i: int,
    stack: str = "decoder",
    rope_norm: Norm | None = None,
) -> Iterator[AttentionLayer]:
    """The content and rotary forms of the MLA module at ``p`` (layer ``i`` of ``stack``); ``rope_norm``:
    an RMS norm of the rotary key alone, its gain folded into W_kva,rope."""
    heads = config.num_attention_heads
    nope, rope, latent = config.qk_nope_head_dim, config.qk_rope_head_dim, config.kv_lora_rank
    qk_dim = nope + rope
    bias = bool(getattr(config, "attention_bias", False))
    left_out = ("rms_norm_scalars", "scale") + (("bias",) if bias else ())
    if getattr(config, "q_lora_rank", None) is None:
        q_a, b_q_latent = None, None
        q_b = reader.get(f"{p}.q_proj.weight")  # (H·qk_dim, d)
    else:
        gain = reader.get(f"{p}.q_a_layernorm.weight")
        q_a = linear(reader.get(f"{p}.q_a_proj.weight")) * gain  # d × r_q, x W_qa diag(g_q)
        b_q_latent = reader.get(f"{p}.q_a_proj.bias") * gain if bias else None
        q_b = reader.get(f"{p}.q_b_proj.weight")  # (H·qk_dim, r_q)

    kv_a = reader.get(f"{p}.kv_a_proj_with_mqa.weight")  # (r_kv + rope, d)
    kv_a_bias = reader.get(f"{p}.kv_a_proj_with_mqa.bias") if bias else None
    kv_gain = reader.get(f"{p}.kv_a_layernorm.weight")
    kv_b_k = linear(
        _heads_rows(reader.get(f"{p}.kv_b_proj.weight"), heads, nope + config.v_head_dim, slice(0, nope))
    )
    w_k = (linear(kv_a[:latent]) * kv_gain) @ kv_b_k
    b_k = (kv_a_bias[:latent] * kv_gain) @ kv_b_k if bias else None
    w_q, b_q = _query(q_a, b_q_latent, q_b, heads, qk_dim, slice(0, nope))
    yield AttentionLayer(
        stack=stack,
        layer=i,
        w_q=w_q,
        w_k=w_k,
        b_q=b_q,
        b_k=b_k,
        n_heads=heads,
        n_kv_heads=heads,
        head_dim=nope,
        left_out=left_out,
        form=CONTENT_FORM,
    )
    if not rope:
        return  # no decoupled rotary part (GLM-5-Next's latent attention)
    w_q_rope, b_q_rope = _query(q_a, b_q_latent, q_b, heads, qk_dim, slice(nope, qk_dim))
    k_gain = reader.get(f"{p}.{rope_norm.name}.weight") + rope_norm.offset if rope_norm else 1.0
    yield AttentionLayer(
        stack=f"{stack}_rope",
        layer=i,
        w_q=w_q_rope,
        w_k=linear(kv_a[latent:]) * k_gain,
        b_q=b_q_rope,
        b_k=kv_a_bias[latent:] * k_gain if bias else None,
        n_heads=heads,
        n_kv_heads=1,
        head_dim=rope,
        left_out=left_out + ("rotary",),
        form=ROPE_NORM_FORM if rope_norm else ROPE_FORM,
    )
