"""Forward-pass conformance: the architecture map's W_q, W_k (and biases) must reproduce the model's own q·k.

A tiny random model (float64, biases randomised) runs a forward pass with rotary neutralised (position
ids 0); a registered attention function records the real per-head query and key tensors and a
pre-hook records each attention module's input x. Then for every head h,
(x W_q,h + b_q,h)(x W_k,g(h) + b_k,g(h))ᵀ must equal Q_h K_g(h)ᵀ, with W_q, W_k read back from disk.
Families outside the attention interface hand over q and k through one of their own methods
(``capture_method_qk``), their projection modules (``capture_projections``), the call that forms the
scores (``capture_call_operands``) or torch's multi-head attention (``capture_torch_multihead``).
Families that normalise q and k are checked up to per-token scalars (``assert_conforms_up_to_scale``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AttentionInterface, AutoConfig, AutoModel, PretrainedConfig
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from attngeom.architectures import AttentionLayer, UnscoredLayer, architecture_for
from attngeom.conformance.neutral import removed_after
from attngeom.scores import split_heads
from attngeom.sources import open_source

CAPTURE = "attngeom_capture"
BERT_SIZES = {"hidden_size": 48, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 64}
"""A small BERT-style encoder (the families that name their sizes as BERT does)."""
TEXT_SIZES = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 32,
    "vocab_size": 100,
}
"""A small text tower: 4 heads of 8, a vocabulary of 100."""
VISION_SIZES = {
    "hidden_size": 24,
    "num_hidden_layers": 2,
    "num_attention_heads": 3,
    "intermediate_size": 32,
    "image_size": 32,
    "patch_size": 8,
}
"""A small ViT-style vision tower: 3 heads of 8, 32 × 32 images of 8 × 8 patches."""


@dataclass
class Capture:
    x: torch.Tensor  # (B, N, d) input of the attention module (the queries' input)
    q: torch.Tensor  # (B, H, N, d_h) as the model computed it
    k: torch.Tensor  # (B, H_kv, M, d_h)
    x_k: torch.Tensor | None = None  # (B, M, d_k) input of the keys where it is not x (cross-attention)


Inputs = tuple[torch.Tensor, torch.Tensor]
"""An attention call's query input and key input (the same tensor for self-attention)."""


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


def layers_from_disk(model: torch.nn.Module, directory: Path) -> list[AttentionLayer | UnscoredLayer]:
    """Save the model with save_pretrained (safetensors) and read the map's layers back from disk."""
    model.save_pretrained(directory)
    source = open_source(directory)
    return list(architecture_for(source.config).layers(source.config, source))


def scored(layers: Iterable[AttentionLayer | UnscoredLayer]) -> list[AttentionLayer]:
    """The layers that have a form (the ones an attention call must reproduce)."""
    return [layer for layer in layers if isinstance(layer, AttentionLayer)]


# ---- what an attention module is given ---------------------------------------------------------------------


def hidden_states(module: torch.nn.Module, args: tuple, kwargs: dict) -> Inputs:
    """Self-attention: the ``hidden_states`` argument, or else the first positional one."""
    x = kwargs.get("hidden_states", args[0] if args else None)
    return x, x


def default_qk_inputs(module: torch.nn.Module, arguments: dict) -> Inputs:
    """Queries read ``hidden_states``; keys read ``key_value_states`` / ``encoder_hidden_states`` if given."""
    x_q = arguments["hidden_states"]
    for name in ("key_value_states", "encoder_hidden_states"):
        if arguments.get(name) is not None:
            return x_q, arguments[name]
    return x_q, x_q


def position_augmented_inputs(module: torch.nn.Module, arguments: dict) -> Inputs:
    """DETR-style: queries see X + P, keys see X + P (self) or X_enc + P_enc (cross)."""
    x_q, x_k = default_qk_inputs(module, arguments)
    pos = arguments.get("position_embeddings")
    cross = x_k is not x_q
    pos_k = arguments.get("encoder_position_embeddings") if cross else pos
    return (x_q if pos is None else x_q + pos), (x_k if pos_k is None else x_k + pos_k)


def by_argument_name(qk_inputs: Callable[[torch.nn.Module, dict], Inputs]):
    """A reader for ``recorded_inputs`` from one that takes the forward's arguments by name."""

    def read(module: torch.nn.Module, args: tuple, kwargs: dict) -> Inputs:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs)
        arguments = dict(bound.arguments)
        arguments.update(arguments.pop("kwargs", {}))
        return qk_inputs(module, arguments)

    return read


@contextmanager
def recorded_inputs(
    modules: Iterable[torch.nn.Module], read=hidden_states, into: dict | None = None
) -> Iterator[dict[int, tuple[torch.Tensor, torch.Tensor | None]]]:
    """While the block runs: by ``id(module)``, the query input and key input (None: the same) of each
    module's call in progress or last call, as ``read(module, args, kwargs)`` picks them."""
    seen = {} if into is None else into

    def pre_hook(module, args, kwargs):
        x_q, x_k = read(module, args, kwargs)
        seen[id(module)] = (x_q.detach(), None if x_k is x_q else x_k.detach())

    with removed_after([m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]):
        yield seen


@contextmanager
def rotary_neutralised(model: torch.nn.Module) -> Iterator[None]:
    """While the block runs, every attention module gets rotary (cos, sin) = (1, 0): the identity.

    For models whose rotary positions cannot be set to 0 from outside (2-D rotary of vision towers,
    Qwen2-VL's multimodal rotary): their ``position_embeddings`` keyword argument is replaced.
    """

    def pre_hook(module, args, kwargs):
        if kwargs.get("position_embeddings") is None:
            return None
        cos, sin = kwargs["position_embeddings"]
        return args, {**kwargs, "position_embeddings": (torch.ones_like(cos), torch.zeros_like(sin))}

    modules = [m for m in model.modules() if "Attention" in type(m).__name__]
    with removed_after([m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]):
        yield


def forward(model: torch.nn.Module, inputs: dict) -> None:
    with torch.no_grad():
        model(**inputs)


def _heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(B, N, H·d_h) → (B, H, N, d_h)."""
    return t.reshape(*t.shape[:-1], -1, head_dim).transpose(1, 2)


# ---- families using transformers' attention interface ------------------------------------------------------

_calls: list[Capture] = []
_latest: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}  # filled by ``recorded_inputs``


def _capture_attention(module, query, key, value, attention_mask, **kwargs):
    if id(module) in _latest:  # paired with the input of this very call: ALBERT re-applies shared modules
        x, x_k = _latest[id(module)]
        _calls.append(Capture(x, query.detach(), key.detach(), x_k))
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(CAPTURE, _capture_attention)


def _attention_configs(model: torch.nn.Module) -> list[PretrainedConfig]:
    """Every config an attention module may read: the model's and its modules' own (ViT-MAE's decoder
    holds a copy; DETR's backbone refuses ``set_attn_implementation``)."""
    configs = {id(model.config): model.config}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig):
            configs[id(config)] = config
    return list(configs.values())


@contextmanager
def _attention_implementation(model: torch.nn.Module, implementation: str) -> Iterator[None]:
    configs = _attention_configs(model)
    previous = [config._attn_implementation_internal for config in configs]
    for config in configs:
        config._attn_implementation_internal = implementation
    try:
        yield
    finally:
        for config, before in zip(configs, previous, strict=True):
            config._attn_implementation_internal = before


def _capture_qk(model: torch.nn.Module, inputs: dict, read, module_filter) -> list[Capture]:
    modules = [
        m
        for m in model.modules()
        if "Attention" in type(m).__name__ and (module_filter is None or module_filter(m))
    ]
    _calls.clear()
    _latest.clear()
    with recorded_inputs(modules, read, into=_latest), _attention_implementation(model, CAPTURE):
        forward(model, inputs)
    return list(_calls)


def capture_qk(model: torch.nn.Module, inputs: dict, module_filter=None) -> list[Capture]:
    """Run ``model(**inputs)`` with the capturing attention function; one Capture per attention call of a
    module whose class name has "Attention" (and that passes ``module_filter``)."""
    return _capture_qk(model, inputs, hidden_states, module_filter)


def capture_qk_pairs(
    model: torch.nn.Module, inputs: dict, qk_inputs=default_qk_inputs, module_filter=None
) -> list[Capture]:
    """Like ``capture_qk``, with the query input and key input that ``qk_inputs`` reads by argument name."""
    return _capture_qk(model, inputs, by_argument_name(qk_inputs), module_filter)


# ---- families outside the attention interface --------------------------------------------------------------


def capture_method_qk(model: torch.nn.Module, inputs: dict, method: str, extract) -> list[Capture]:
    """q and k from one of the model's own methods that computes or receives them.

    Every module whose class defines ``method`` has it wrapped for one forward pass; ``extract(module,
    args, result)`` returns the (B, H, N, d_h) query and (B, H_kv, N, d_h) key the model computed in that
    call. A pre-hook on the same module records its input x.
    """
    modules = [m for m in model.modules() if callable(getattr(type(m), method, None))]
    seen: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
    captures: list[Capture] = []

    def wrap(module: torch.nn.Module, original):
        def wrapper(*args, **kwargs):
            result = original(module, *args, **kwargs)
            q, k = extract(module, args, result)
            x, x_k = seen[id(module)]
            captures.append(Capture(x, q.detach().clone(), k.detach().clone(), x_k))
            return result

        return wrapper

    with recorded_inputs(modules, into=seen):
        for module in modules:
            setattr(module, method, wrap(module, getattr(type(module), method)))
        try:
            forward(model, inputs)
        finally:
            for module in modules:
                delattr(module, method)
    return captures


def capture_projections(
    model: torch.nn.Module,
    inputs: dict,
    attention_type: type,
    q_name: str,
    k_name: str,
    qk_inputs=default_qk_inputs,
) -> list[Capture]:
    """The outputs of each ``attention_type`` module's own q/k projection modules (``q_name``, ``k_name``),
    at their first call within the module's call.

    Reshaped to (B, H, N, d_h) with the attention module's head width; the inputs come from a pre-hook.
    """
    modules = [m for m in model.modules() if isinstance(m, attention_type)]
    seen: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
    projected: dict[str, torch.Tensor] = {}
    captures: list[Capture] = []

    def keep(name: str):
        def hook(projection, args, output):  # the first call: LongT5's global keys reuse ``k`` after it
            projected.setdefault(name, output.detach())

        return hook

    def after(module, args, output):
        head_dim = (
            getattr(module, "head_dim", None)
            or getattr(module, "key_value_proj_dim", None)  # the T5 family
            or module.attention_head_size
        )
        q, k = _heads(projected.pop("q"), head_dim), _heads(projected.pop("k"), head_dim)
        captures.append(Capture(seen[id(module)][0], q, k, seen[id(module)][1]))

    handles = []
    for module in modules:
        handles.append(module.get_submodule(q_name).register_forward_hook(keep("q")))
        handles.append(module.get_submodule(k_name).register_forward_hook(keep("k")))
        handles.append(module.register_forward_hook(after))
    with removed_after(handles), recorded_inputs(modules, by_argument_name(qk_inputs), into=seen):
        forward(model, inputs)
    return captures


def capture_fused_qkv(model: torch.nn.Module, inputs: dict, attention_type: type) -> list[Capture]:
    """Modules of ``attention_type`` whose ``qkv`` linear yields [q; k; v] per head (BLIP, TimeSformer,
    Qwen2-VL's vision): its input and output, split as those modules split it. A 2-D input (tokens ×
    width, Qwen2-VL's packed sequence) is one batch."""
    captures: list[Capture] = []

    def hook(projection, args, output, heads: int):
        x, qkv = args[0], output
        if x.dim() == 2:
            x, qkv = x[None], qkv[None]
        q, k, _ = qkv.reshape(x.shape[0], x.shape[1], 3, heads, -1).permute(2, 0, 3, 1, 4)
        captures.append(Capture(x.detach(), q.detach(), k.detach()))

    handles = [
        module.qkv.register_forward_hook(partial(hook, heads=module.num_heads))
        for module in model.modules()
        if isinstance(module, attention_type)
    ]
    with removed_after(handles):
        forward(model, inputs)
    return captures


def capture_torch_multihead(model: torch.nn.Module, inputs: dict, project) -> list[Capture]:
    """Modules that call torch's ``multi_head_attention_forward`` (nn.MultiheadAttention, WavLM).

    ``project(query, key, value, in_proj_weight, in_proj_bias, kwargs)`` repeats torch's own projection
    step there (``F._in_projection`` or ``F._in_projection_packed``) and returns q and k as (N, B, E).
    """
    captures: list[Capture] = []
    original = F.multi_head_attention_forward

    def wrapped(query, key, value, embed_dim, num_heads, in_proj_weight, in_proj_bias, *args, **kwargs):
        q, k = project(query, key, value, in_proj_weight, in_proj_bias, kwargs)

        def heads(t: torch.Tensor) -> torch.Tensor:  # (N, B, E) → (B, H, N, d_h)
            return t.reshape(t.shape[0], t.shape[1], num_heads, -1).permute(1, 2, 0, 3).detach()

        x_k = None if key is query else key.transpose(0, 1).detach()
        captures.append(Capture(query.transpose(0, 1).detach(), heads(q), heads(k), x_k))
        return original(
            query, key, value, embed_dim, num_heads, in_proj_weight, in_proj_bias, *args, **kwargs
        )

    F.multi_head_attention_forward = wrapped
    try:
        forward(model, inputs)
    finally:
        F.multi_head_attention_forward = original
    return captures


def capture_call_operands(
    model: torch.nn.Module,
    inputs: dict,
    attention_type: type,
    owner: object,
    name: str,
    qk: Callable,
    qk_inputs=default_qk_inputs,
) -> list[Capture]:
    """q and k as the operands of the call that forms the scores, for families that form q·k in their own
    code (MPT's ``torch.matmul``, XLNet's ``torch.einsum``, Longformer's sliding-chunk product).

    While an ``attention_type`` module runs, ``owner.name`` (``torch.matmul``, or a method on a class) is
    wrapped; the first of its calls for which ``qk(*args)`` returns (q, k), both (B, H, N, d_h), is that
    module call's capture. The inputs come from a pre-hook, read by ``qk_inputs``.
    """
    modules = [m for m in model.modules() if isinstance(m, attention_type)]
    seen: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
    running: list[list] = []  # [module, captured yet] of the attention calls in progress
    captures: list[Capture] = []
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        if running and not running[-1][1] and (found := qk(*args)) is not None:
            x, x_k = seen[id(running[-1][0])]
            captures.append(Capture(x, found[0].detach().clone(), found[1].detach().clone(), x_k))
            running[-1][1] = True
        return original(*args, **kwargs)

    def enter(module, args, kwargs):
        running.append([module, False])

    def leave(module, args, output):
        running.pop()

    handles = [m.register_forward_pre_hook(enter, with_kwargs=True) for m in modules]
    handles += [m.register_forward_hook(leave) for m in modules]
    with removed_after(handles), recorded_inputs(modules, by_argument_name(qk_inputs), into=seen):
        setattr(owner, name, wrapped)
        try:
            forward(model, inputs)
        finally:
            setattr(owner, name, original)
    return captures


# ---- the check ---------------------------------------------------------------------------------------------


def assert_conforms(
    captures: list[Capture], layers: list[AttentionLayer], rtol: float = 1e-9, q_scaled: bool = False
) -> None:
    """Per head, (x_q W_q,h + b_q,h)(x_k W_k,g + b_k,g)ᵀ equals the captured Q_h K_gᵀ (x_k = x_q for self).

    ``q_scaled``: the model multiplies q by 1/√d_h before the attention call (Whisper), so the captured
    scores carry that factor.
    """
    assert len(captures) == len(layers), f"{len(captures)} attention calls but {len(layers)} mapped layers"
    for capture, layer in zip(captures, layers, strict=True):
        x_k = capture.x if capture.x_k is None else capture.x_k
        q_heads = split_heads(layer.w_q.double(), layer.n_heads, layer.head_dim)  # (H, d, d_h)
        k_heads = split_heads(layer.w_k.double(), layer.n_kv_heads, layer.head_dim)
        q = torch.einsum("bnd,hde->bhne", capture.x.double(), q_heads)
        k = torch.einsum("bnd,hde->bhne", x_k.double(), k_heads)
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


def project(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, heads: int, head_dim: int
) -> torch.Tensor:
    """(B, N, d) → (B, H, N, d_h): x W (+ b), split into heads."""
    out = x.double() @ w.double()
    if b is not None:
        out = out + b.double()
    return out.reshape(*x.shape[:2], heads, head_dim).transpose(1, 2)


def assert_conforms_up_to_scale(
    captures, layers, shared_across_heads: bool, shifts=None, rtol: float = 1e-6
) -> None:
    """Captured q (and k), minus LayerNorm's additive bias, is c · (x W' + b') with c > 0 per token (and head).

    Then Q_h K_gᵀ = diag(c_q) (x W_q' + b_q')(x W_k' + b_k')ᵀ diag(c_k), which is also checked. The
    RMSNorms compute their statistic in float32, hence ``rtol`` above float64 precision.
    """
    assert len(captures) == len(layers)
    for capture, layer in zip(captures, layers, strict=True):
        shift_q, shift_k = shifts[layer.layer] if shifts else (0.0, 0.0)
        ours_q = project(capture.x, layer.w_q, layer.b_q, layer.n_heads, layer.head_dim)
        ours_k = project(capture.x, layer.w_k, layer.b_k, layer.n_kv_heads, layer.head_dim)
        scalars = []
        for ours, theirs in ((ours_q, capture.q.double() - shift_q), (ours_k, capture.k.double() - shift_k)):
            c = (ours * theirs).sum(-1) / (ours * ours).sum(-1)  # (B, H, N)
            assert (c > 0).all(), f"layer {layer.layer}: a negative per-token scalar"
            error = ((theirs - c[..., None] * ours).abs().max() / theirs.abs().max()).item()
            assert error < rtol, (
                f"layer {layer.layer}: not a per-token rescaling (relative error {error:.2e})"
            )
            if shared_across_heads:
                spread = ((c - c[:, :1]).abs().max() / c.abs().max()).item()
                assert spread < rtol, f"layer {layer.layer}: per-token scalar differs between heads"
            scalars.append(c)
        group = layer.n_heads // layer.n_kv_heads
        c_q, c_k = scalars[0], scalars[1].repeat_interleave(group, dim=1)
        ours_qk = ours_q @ ours_k.repeat_interleave(group, dim=1).mT * c_q[..., :, None] * c_k[..., None, :]
        theirs_q, theirs_k = capture.q.double() - shift_q, capture.k.double() - shift_k
        theirs_qk = theirs_q @ theirs_k.repeat_interleave(group, dim=1).mT
        torch.testing.assert_close(ours_qk, theirs_qk, rtol=rtol, atol=rtol * theirs_qk.abs().max().item())
