"""Exact-by-construction test of the multi-head latent attention form (DeepSeek-V2/V3).

The model's own q·k, split into its content (nope) and rotary parts, must equal the documented forms
times the per-token RMS-norm scalars s_q(x) s_kv(y) (content) and s_q(x) (rotary), read from the
model's own norm inputs; rotary is the identity at position 0.
"""

from __future__ import annotations

import pytest
import torch
from conformance import build, capture_qk, layers_from_disk, tiny_config, token_inputs

import attngeom

SIZES = dict(
    hidden_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    kv_lora_rank=12,
    qk_nope_head_dim=6,
    qk_rope_head_dim=4,
    v_head_dim=5,
    intermediate_size=32,
    moe_intermediate_size=16,
    vocab_size=100,
)
DENSE = dict(
    first_k_dense_replace=2
)  # MLP layers only: the MoE kernels need float32, attention does not care
CASES = {
    "deepseek_v3": dict(q_lora_rank=16, **DENSE),
    "deepseek_v3_bias": dict(q_lora_rank=16, attention_bias=True, **DENSE),
    "deepseek_v2_lite": dict(q_lora_rank=None, **DENSE),
}
TOL = 1e-5
"""The model computes its RMS norms (and DeepSeek-V2 its rotary) in float32 even for float64 weights, so
the forms agree to float32 rounding, not float64; a wrong mapping is off by O(1)."""


def _norm_scalars(model, name: str) -> list[torch.Tensor]:
    """Hooks recording 1/rms of the input of every ``name`` RMS norm (the per-token scalar it applies)."""
    scalars: list[torch.Tensor] = []

    def hook(module, args):
        x = args[0]
        scalars.append(torch.rsqrt(x.pow(2).mean(-1) + module.variance_epsilon).detach())

    return scalars, [m.register_forward_pre_hook(hook) for n, m in model.named_modules() if n.endswith(name)]


def _form(x, layer, n_kv):
    q = torch.einsum("bnd,hde->bhne", x, layer.w_q.unflatten(1, (layer.n_heads, -1)).permute(1, 0, 2))
    k = torch.einsum("bnd,hde->bhne", x, layer.w_k.unflatten(1, (n_kv, -1)).permute(1, 0, 2))
    if layer.b_q is not None:
        q = q + layer.b_q.reshape(1, layer.n_heads, 1, -1)
    if layer.b_k is not None:
        k = k + layer.b_k.reshape(1, n_kv, 1, -1)
    return q @ k.expand(-1, layer.n_heads, -1, -1).mT


@pytest.mark.parametrize("case", sorted(CASES))
def test_mla_content_and_rope_forms_are_exact(case, tmp_path):
    model_type = case.split("_bias")[0].replace("_lite", "")
    config = tiny_config(model_type, **SIZES, **CASES[case])
    model = build(config)
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["decoder", "decoder_rope"] * 2
    s_q, hooks_q = _norm_scalars(model, "q_a_layernorm")
    s_kv, hooks_kv = _norm_scalars(model, "kv_a_layernorm")
    try:
        captures = capture_qk(model, token_inputs(config))
    finally:
        for hook in hooks_q + hooks_kv:
            hook.remove()
    nope = config.qk_nope_head_dim
    for i, capture in enumerate(captures):
        content, rope = layers[2 * i], layers[2 * i + 1]
        sq = s_q[i] if s_q else torch.ones_like(s_kv[i])
        theirs_content = capture.q[..., :nope] @ capture.k[..., :nope].mT
        theirs_rope = capture.q[..., nope:] @ capture.k[..., nope:].mT
        ours_content = _form(capture.x, content, 4) * sq[:, None, :, None] * s_kv[i][:, None, None, :]
        ours_rope = _form(capture.x, rope, 1) * sq[:, None, :, None]
        for ours, theirs in ((ours_content, theirs_content), (ours_rope, theirs_rope)):
            atol = TOL * theirs.abs().max().item()
            torch.testing.assert_close(ours, theirs, rtol=TOL, atol=atol)
        unscaled = _form(capture.x, content, 4)  # the per-token scalars are needed: the check can fail
        assert not torch.allclose(
            unscaled, theirs_content, rtol=TOL, atol=TOL * theirs_content.abs().max().item()
        )
        assert (content.b_q is not None) == ("bias" in case) and content.head_dim == nope


def test_mla_engine_rows(tmp_path):
    model = build(tiny_config("deepseek_v3", **SIZES, **CASES["deepseek_v3"]))
    model.save_pretrained(tmp_path)
    frame = attngeom.score(tmp_path, progress=False)
    assert len(frame) == 2 * 2 * (4 + 1)
    rope = frame[(frame["stack"] == "decoder_rope") & frame["head"].notna()]
    assert set(rope["kv_head"]) == {0} and set(rope["n_kv_heads"]) == {1}
    assert frame["form"].str.startswith("mla_").all() and frame["symmetry"].notna().all()
