"""Forward-pass conformance: the architecture map's W_q, W_k (and biases) must reproduce the model's own q·k.

A tiny random model (float64, biases randomised) runs a forward pass with rotary neutralised (position
ids 0); a registered attention function records the real per-head query and key tensors and a
pre-hook records each attention module's input x. Then for every head h,
(x W_q,h + b_q,h)(x W_k,g(h) + b_k,g(h))ᵀ must equal Q_h K_g(h)ᵀ, with W_q, W_k read back from disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AttentionInterface, AutoConfig, AutoModel, PretrainedConfig
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from attngeom.architectures import AttentionLayer, architecture_for
from attngeom.scores import split_heads
from attngeom.sources import open_source

CAPTURE = "attngeom_capture"


@dataclass
class Capture:
    x: torch.Tensor  # (B, N, d) input of the attention module
    q: torch.Tensor  # (B, H, N, d_h) as the model computed it
    k: torch.Tensor  # (B, H_kv, N, d_h)


_records: list[tuple[torch.nn.Module, torch.Tensor, torch.Tensor]] = []


def _capture_attention(module, query, key, value, attention_mask, **kwargs):
    _records.append((module, query.detach(), key.detach()))
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(CAPTURE, _capture_attention)


def tiny_config(model_type: str, **overrides) -> PretrainedConfig:
    """A small config of ``model_type`` (override any size the family names differently)."""
    return AutoConfig.for_model(model_type, **overrides)


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter (biases and norms too) drawn at random, in float64, so no term hides behind a zero."""
    generator = torch.Generator().manual_seed(seed)
    model = model.double().eval()
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.3)
    return model


def build(config: PretrainedConfig, model_class=AutoModel, seed: int = 0) -> torch.nn.Module:
    return randomize(model_class.from_config(config), seed)


def capture_qk(model: torch.nn.Module, inputs: dict, module_filter=None) -> list[Capture]:
    """Run ``model(**inputs)`` with the capturing attention function; one Capture per attention call."""
    inputs_seen: dict[int, torch.Tensor] = {}

    def pre_hook(module, args, kwargs):
        x = kwargs.get("hidden_states", args[0] if args else None)
        inputs_seen[id(module)] = x.detach()

    previous = model.config._attn_implementation
    model.set_attn_implementation(CAPTURE)
    hooks = [
        m.register_forward_pre_hook(pre_hook, with_kwargs=True)
        for m in model.modules()
        if "Attention" in type(m).__name__ and (module_filter is None or module_filter(m))
    ]
    _records.clear()
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
        model.set_attn_implementation(previous)
    return [Capture(inputs_seen[id(m)], q, k) for m, q, k in _records]


def layers_from_disk(model: torch.nn.Module, directory: Path) -> list[AttentionLayer]:
    """Save the model with save_pretrained (safetensors) and read the map's layers back from disk."""
    model.save_pretrained(directory)
    source = open_source(directory)
    return list(architecture_for(source.config).layers(source.config, source))


def assert_conforms(captures: list[Capture], layers: list[AttentionLayer], rtol: float = 1e-9) -> None:
    """Per head, (x W_q,h + b_q,h)(x W_k,g + b_k,g)ᵀ equals the captured Q_h K_gᵀ."""
    assert len(captures) == len(layers), f"{len(captures)} attention calls but {len(layers)} mapped layers"
    for capture, layer in zip(captures, layers, strict=True):
        x = capture.x.double()
        q_heads = split_heads(layer.w_q.double(), layer.n_heads, layer.head_dim)  # (H, d, d_h)
        k_heads = split_heads(layer.w_k.double(), layer.n_kv_heads, layer.head_dim)
        q = torch.einsum("bnd,hde->bhne", x, q_heads)
        k = torch.einsum("bnd,hde->bhne", x, k_heads)
        if layer.b_q is not None:
            q = q + layer.b_q.double().reshape(1, layer.n_heads, 1, layer.head_dim)
        if layer.b_k is not None:
            k = k + layer.b_k.double().reshape(1, layer.n_kv_heads, 1, layer.head_dim)
        group = layer.n_heads // layer.n_kv_heads
        ours = q @ k.repeat_interleave(group, dim=1).mT
        theirs = capture.q.double() @ capture.k.double().repeat_interleave(group, dim=1).mT
        assert ours.shape == theirs.shape, (
            f"{layer.stack} layer {layer.layer}: {ours.shape} vs {theirs.shape}"
        )
        scale = theirs.abs().max().clamp_min(1e-12)
        error = ((ours - theirs).abs().max() / scale).item()
        assert error < rtol, f"{layer.stack} layer {layer.layer}: relative error {error:.2e}"


def token_inputs(
    config: PretrainedConfig, batch: int = 2, length: int = 7, seed: int = 1, zero_positions=True
):
    """Random token ids, and position ids 0 so rotary embeddings are the identity."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=generator)
    inputs = {"input_ids": ids}
    if zero_positions:
        inputs["position_ids"] = torch.zeros_like(ids)
    return inputs
