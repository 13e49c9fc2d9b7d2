"""One model_type's conformance: a tiny random model's own q·k against attngeom's per-head forms.

The tiny model (``tiny``) is built at random in float64 and saved with ``save_pretrained``; attngeom's
discovered layers are read back from those files. A forward pass records, per attention module, the
input and output of its q and k projections and the q and k that reach transformers' attention function
(rotary neutralised: cos 1, sin 0). For every head h the form must give the captured scores:
Q_h K_gᵀ = diag(c_q)(x W_q,h + b_q,h)(x W_k,g + b_k,g)ᵀ diag(c_k), with c one positive constant for a
``standard`` form (the 1/√d_h scale) and a positive scalar per token and head for a normalised one.
A module outside the attention interface is checked on its projections' outputs (standard forms only).
"""

from __future__ import annotations

import sys
from contextlib import ExitStack, contextmanager

import torch

from ..architectures.discovery import Found
from .inputs import input_sets

CAPTURE = "attngeom_conformance"
RTOL = 1e-5
_interface: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _attention(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    _interface.setdefault(id(module), (query.detach(), key.detach()))
    if kwargs.get("softcap") is not None:  # sdpa has no softcap: the model's own eager attention
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is not None:
            return eager(module, query, key, value, attention_mask, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def _register() -> None:
    """The capturing attention function, with eager attention's masks (always a 4-D tensor: some families
    index the mask they are given)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(CAPTURE, _attention)
    AttentionMaskInterface.register(CAPTURE, eager_mask)


def randomized(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    model = model.double().eval()
    if hasattr(model, "set_experts_implementation"):
        try:  # grouped matrix products take no float64
            model.set_experts_implementation("eager")
        except (ValueError, AttributeError):
            pass
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.3)
    return model


@contextmanager
def _rotary_neutralised(modules: list[torch.nn.Module]):
    def pre_hook(module, args, kwargs):
        cos_sin = kwargs.get("position_embeddings")
        if not isinstance(cos_sin, tuple) or len(cos_sin) != 2:
            return None
        cos, sin = cos_sin
        return args, {**kwargs, "position_embeddings": (torch.ones_like(cos), torch.zeros_like(sin))}

    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def _implementation(model: torch.nn.Module, name: str):
    from transformers import PretrainedConfig

    configs = {id(model.config): model.config}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig):
            configs[id(config)] = config
    before = {key: c._attn_implementation_internal for key, c in configs.items()}
    for config in configs.values():
        config._attn_implementation_internal = name
    try:
        yield
    finally:
        for key, config in configs.items():
            config._attn_implementation_internal = before[key]


@contextmanager
def _default_dtype(dtype: torch.dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def capture(model: torch.nn.Module, items: list[Found]) -> dict[str, dict[str, torch.Tensor]]:
    """By attention path: x_q, x_k (projection inputs), q, k (projection outputs) and, where the module
    goes through the attention interface, q_attn and k_attn as the attention function got them."""
    seen: dict[str, dict[str, torch.Tensor]] = {}
    modules = {item.path: model.get_submodule(item.path) for item in items}

    def keep(path: str, role: str):
        def hook(projection, args, output):
            record = seen.setdefault(path, {})
            if f"x_{role}" not in record:
                record[f"x_{role}"], record[role] = args[0].detach(), output.detach()

        return hook

    _register()
    _interface.clear()
    with ExitStack() as stack:
        for item in items:
            module = modules[item.path]
            for role, name in (("q", item.q), ("k", item.k)):
                child = module.get_submodule(name.rsplit(".", 1)[-1])
                handle = child.register_forward_hook(keep(item.path, role))
                stack.callback(handle.remove)
        stack.enter_context(_rotary_neutralised(list(modules.values())))
        stack.enter_context(_implementation(model, CAPTURE))
        stack.enter_context(_default_dtype(torch.float64))  # tensors a model makes itself (masks, positions)
        pending = [item.path for item in items]
        failure: Exception | None = None
        for runner in _runners(model, items):
            for inputs in input_sets(runner):
                before, interface = set(seen), set(_interface)
                try:
                    with torch.no_grad():
                        runner(**inputs)
                    break
                except Exception as err:  # noqa: BLE001 — the next input set, or the next runner
                    failure = err
                    for key in set(seen) - before:  # a call cut short pairs no projection with its q·k
                        del seen[key]
                    for key in set(_interface) - interface:
                        del _interface[key]
            pending = [p for p in pending if p not in seen]
            if not pending:
                break
        if pending and failure is not None:
            raise failure
    for path, module in modules.items():
        if id(module) in _interface and path in seen:
            seen[path]["q_attn"], seen[path]["k_attn"] = _interface[id(module)]
    return seen


def _runners(model: torch.nn.Module, items: list[Found]) -> list[torch.nn.Module]:
    """The model itself, then each sub-model (a ``PreTrainedModel`` inside it: a vision tower, an encoder)
    that holds attention modules, for the towers a text-only forward pass does not reach."""
    from transformers import PreTrainedModel

    runners = [model]
    for path, module in model.named_modules():
        if path and isinstance(module, PreTrainedModel) and any(i.path.startswith(path + ".") for i in items):
            runners.append(module)
    return runners


def heads(t: torch.Tensor, n: int, d: int) -> torch.Tensor:
    """(..., N, n·d) → (B, n, N, d), a 2-D packed input as one batch."""
    t = t if t.dim() == 3 else t.reshape(1, -1, t.shape[-1])
    return t.reshape(t.shape[0], t.shape[1], n, d).transpose(1, 2)


def compare(layer, record: dict[str, torch.Tensor], fused: bool = False) -> str | None:
    """Why ``layer`` does not give ``record``'s scores, or None when it does (``fused``: its q/k come
    from one projection, whose split only the attention function's q and k can confirm)."""
    x_q, x_k = record["x_q"].double(), record["x_k"].double()
    ours = []
    for x, w, b, n in (
        (x_q, layer.w_q, layer.b_q, layer.n_heads),
        (x_k, layer.w_k, layer.b_k, layer.n_kv_heads),
    ):
        out = x @ w.double() + (0 if b is None else b.double())
        ours.append(heads(out, n, layer.head_dim))
    attn = "q_attn" in record
    theirs = (
        [record["q_attn"], record["k_attn"]]
        if attn
        else [
            heads(record["q"], layer.n_heads, layer.head_dim),
            heads(record["k"], layer.n_kv_heads, layer.head_dim),
        ]
    )
    if not attn and (layer.form != "standard" or fused):
        return "a normalised form or fused projection outside the attention interface"
    vectors = _compare_vectors(layer, ours, theirs)
    return vectors and _compare_scores(layer, ours, theirs, vectors)


def _compare_scores(layer, ours: list[torch.Tensor], theirs: list[torch.Tensor], vectors: str) -> str | None:
    """The scores Q_h K_gᵀ against diag(c_q) (form's scores) diag(c_k): for a model that permutes the
    head dims of q and k alike (interleaved rotary layouts), which changes no score."""
    group = layer.n_heads // layer.n_kv_heads
    mine = ours[0] @ ours[1].double().repeat_interleave(group, dim=1).mT
    their = theirs[0].double() @ theirs[1].double().repeat_interleave(group, dim=1).mT
    if mine.shape != their.shape:
        return vectors
    ratio = their / mine
    if not (ratio > 0).all():
        return vectors
    rank_one = ratio * ratio[..., :1, :1] - ratio[..., :, :1] * ratio[..., :1, :]
    error = (rank_one.abs().max() / (ratio.abs().max() ** 2)).item()
    if error > RTOL:
        return vectors
    if (
        layer.form == "standard"
        and ((ratio - ratio.flatten()[0]).abs().max() / ratio.abs().max()).item() > RTOL
    ):
        return "a standard form whose scores are rescaled per token"
    return None


def _compare_vectors(layer, ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> str | None:
    """q and k themselves against positive per-token (and head) multiples of the form's projections."""
    scalars = []
    for mine, their in zip(ours, theirs, strict=True):
        their = their.double()
        if mine.shape != their.shape:
            return f"q/k shape {tuple(their.shape)} in the model, {tuple(mine.shape)} from the form"
        c = (mine * their).sum(-1) / (mine * mine).sum(-1).clamp_min(1e-30)
        if not (c > 0).all():
            return "q or k is not a positive multiple of the form's projection"
        error = ((their - c[..., None] * mine).abs().max() / their.abs().max().clamp_min(1e-30)).item()
        if error > RTOL:
            return f"q or k differs from the form's projection (relative error {error:.1e})"
        scalars.append(c)
    if layer.form == "standard":
        for c in scalars:
            if ((c - c.flatten()[0]).abs().max() / c.abs().max()).item() > RTOL:
                return "a standard form whose q or k is rescaled per token"
    return None


def compare_latent(content, rope, record: dict[str, torch.Tensor]) -> str | None:
    """An MLA module: the content form against the no-rope dims of the attention function's q and k, the
    rotary form against the rope dims (one key shared by the heads)."""
    if "q_attn" not in record:
        return "a latent attention outside the attention interface"
    nope = content.head_dim
    q, k = record["q_attn"], record["k_attn"]
    parts = (
        (
            content,
            {"x_q": record["x_q"], "x_k": record["x_k"], "q_attn": q[..., :nope], "k_attn": k[..., :nope]},
        ),
        (
            rope,
            {
                "x_q": record["x_q"],
                "x_k": record["x_k"],
                "q_attn": q[..., nope:],
                "k_attn": k[:, :1, :, nope:],
            },
        ),
    )
    for layer, part in parts:
        why = compare(layer, part)
        if why:
            return f"{layer.stack}: {why}"
    return None
