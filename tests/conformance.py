"""Forward-pass conformance: the architecture map's W_q, W_k (and biases) must reproduce the model's own q·k.

A tiny random model (float64, biases randomised) runs a forward pass with rotary neutralised (position
ids 0); a registered attention function records the real per-head query and key tensors and a
pre-hook records each attention module's input x. Then for every head h,
(x W_q,h + b_q,h)(x W_k,g(h) + b_k,g(h))ᵀ must equal Q_h K_g(h)ᵀ, with W_q, W_k read back from disk.
"""

from __future__ import annotations

import inspect
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


# --- two-input capture: cross-attention and position-augmented inputs (appended for issue 3) -----------------


@dataclass
class PairCapture(Capture):
    x_k: torch.Tensor  # (B, M, d_k) input the keys were computed from (encoder states for cross-attention)


def default_qk_inputs(module: torch.nn.Module, arguments: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries read ``hidden_states``; keys read ``key_value_states`` / ``encoder_hidden_states`` if given."""
    x_q = arguments["hidden_states"]
    for name in ("key_value_states", "encoder_hidden_states"):
        if arguments.get(name) is not None:
            return x_q, arguments[name]
    return x_q, x_q


def position_augmented_inputs(module: torch.nn.Module, arguments: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """DETR-style: queries see X + P, keys see X + P (self) or X_enc + P_enc (cross)."""
    x_q, x_k = default_qk_inputs(module, arguments)
    pos = arguments.get("position_embeddings")
    cross = x_k is not x_q
    pos_k = arguments.get("encoder_position_embeddings") if cross else pos
    return (x_q if pos is None else x_q + pos), (x_k if pos_k is None else x_k + pos_k)


def _bound_arguments(module: torch.nn.Module, args: tuple, kwargs: dict) -> dict:
    bound = inspect.signature(module.forward).bind_partial(*args, **kwargs)
    arguments = dict(bound.arguments)
    arguments.update(arguments.pop("kwargs", {}))
    return arguments


def _attention_configs(model: torch.nn.Module) -> list[PretrainedConfig]:
    """Every config an attention module may read: the model's and its modules' own (ViT-MAE's decoder
    holds a copy; DETR's backbone refuses ``set_attn_implementation``)."""
    configs = {id(model.config): model.config}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig):
            configs[id(config)] = config
    return list(configs.values())


def capture_qk_pairs(
    model: torch.nn.Module, inputs: dict, qk_inputs=default_qk_inputs, module_filter=None
) -> list[PairCapture]:
    """Like ``capture_qk`` but records the query input and the key input of every attention call."""
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def pre_hook(module, args, kwargs):
        x_q, x_k = qk_inputs(module, _bound_arguments(module, args, kwargs))
        seen[id(module)] = (x_q.detach(), x_k.detach())

    configs = _attention_configs(model)
    previous = [config._attn_implementation_internal for config in configs]
    for config in configs:
        config._attn_implementation_internal = CAPTURE
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
        for config, implementation in zip(configs, previous, strict=True):
            config._attn_implementation_internal = implementation
    return [PairCapture(seen[id(m)][0], q, k, seen[id(m)][1]) for m, q, k in _records if id(m) in seen]


def capture_projections(
    model: torch.nn.Module, inputs: dict, attention_type: type, q_name: str, k_name: str, qk_inputs=None
) -> list[PairCapture]:
    """For families that bypass the attention interface: the outputs of the modules' own q/k projections.

    q and k still come from the model's forward pass (forward hooks on its projection modules), reshaped
    to (B, H, N, d_h) with the attention module's head count; the inputs come from a pre-hook.
    """
    qk_inputs = qk_inputs or default_qk_inputs
    calls: list[list] = []
    hooks = []
    for module in model.modules():
        if not isinstance(module, attention_type):
            continue

        def pre_hook(mod, args, kwargs):
            x_q, x_k = qk_inputs(mod, _bound_arguments(mod, args, kwargs))
            calls.append([mod, x_q.detach(), x_k.detach(), None, None])

        def out_hook(slot):
            def hook(mod, args, output):
                calls[-1][slot] = output.detach()

            return hook

        hooks.append(module.register_forward_pre_hook(pre_hook, with_kwargs=True))
        hooks.append(module.get_submodule(q_name).register_forward_hook(out_hook(3)))
        hooks.append(module.get_submodule(k_name).register_forward_hook(out_hook(4)))
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        for hook in hooks:
            hook.remove()

    def heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
        return t.reshape(*t.shape[:-1], -1, head_dim).transpose(1, 2)

    captures = []
    for module, x_q, x_k, q, k in calls:
        head_dim = getattr(module, "head_dim", None) or module.attention_head_size
        captures.append(PairCapture(x_q, heads(q, head_dim), heads(k, head_dim), x_k))
    return captures


def assert_conforms_pairs(
    captures: list[PairCapture], layers: list[AttentionLayer], rtol: float = 1e-9, q_scaled: bool = False
) -> None:
    """Per head, (x_q W_q,h + b_q,h)(x_k W_k,g + b_k,g)ᵀ equals the captured Q_h K_gᵀ (x_k = x_q for self).

    ``q_scaled``: the model multiplies q by 1/√d_h before the attention call (Whisper), so the captured
    scores carry that factor.
    """
    assert len(captures) == len(layers), f"{len(captures)} attention calls but {len(layers)} mapped layers"
    for capture, layer in zip(captures, layers, strict=True):
        q_heads = split_heads(layer.w_q.double(), layer.n_heads, layer.head_dim)
        k_heads = split_heads(layer.w_k.double(), layer.n_kv_heads, layer.head_dim)
        q = torch.einsum("bnd,hde->bhne", capture.x.double(), q_heads)
        k = torch.einsum("bnd,hde->bhne", capture.x_k.double(), k_heads)
        if layer.b_q is not None:
            q = q + layer.b_q.double().reshape(1, layer.n_heads, 1, layer.head_dim)
        if layer.b_k is not None:
            k = k + layer.b_k.double().reshape(1, layer.n_kv_heads, 1, layer.head_dim)
        group = layer.n_heads // layer.n_kv_heads
        ours = q @ k.repeat_interleave(group, dim=1).mT
        theirs = capture.q.double() @ capture.k.double().repeat_interleave(group, dim=1).mT
        if q_scaled:
            theirs = theirs * layer.head_dim**0.5
        where = f"{layer.stack} layer {layer.layer}"
        assert ours.shape == theirs.shape, f"{where}: {ours.shape} vs {theirs.shape}"
        scale = theirs.abs().max().clamp_min(1e-12)
        error = ((ours - theirs).abs().max() / scale).item()
        assert error < rtol, f"{where}: relative error {error:.2e}"
