"""Discovered architectures: the layers of what ``discovery`` found, read from a checkpoint.

``discover(config)`` is the ``Architecture`` the engine consumes for a ``model_type`` without a table
(see ``discovery`` for how the layout is found): the tensor names are the model's parameter names, read
through ``Converted`` where transformers saves them under other names or in another shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from ..base import Architecture, ArchitectureError, AttentionLayer, TensorReader, UnscoredLayer, linear
from .attention import HEADLESS, SCORER, Found, Skipped, find_attention, meta_model
from .converted import Converted
from .model_classes import declared_class, main_input
from .observed import Observed
from .stacks import template

if TYPE_CHECKING:
    from transformers import PretrainedConfig

UNSEEN = (
    "not validated: the conformance run validated no attention module of this kind (see its type's entry)"
)
"""Said of a module the checkpoint's config adds (GPT-2's cross-attention) or of a tower that did not
validate (Gemma 4's audio tower): recorded, not scored."""
CONTENT_BIAS = re.compile(r"^(pos_)?bias_u$|^r_w_bias$")
"""Transformer-XL's names for the learned content bias u that a relative-position attention adds to every
query before q·k (its positional bias v meets only the position keys): a query bias of the form."""


def layer_terms(
    model: torch.nn.Module, config: PretrainedConfig, items: list[Found | Skipped], observed: Observed
) -> dict[str, tuple[str, ...]]:
    """By attention path: what its form leaves out besides its biases. Rotary where a rotary embedding
    sits in the attention's own sub-model (a LLaVA's language model, not its vision tower), with that
    sub-model's config's NoPE layers and windows (``rotary_terms``; windows also without rotary); the
    scale, a score bias and a soft cap as the forward pass showed them (``Observed.terms``)."""
    from transformers import PretrainedConfig

    from ..positions import rotary_terms, window

    rotaries = [p.rpartition(".")[0] for p, m in model.named_modules() if "Rotary" in type(m).__name__]
    terms = {}
    for item in items:
        if not isinstance(item, Found) or item.latent:
            continue
        module = model.get_submodule(item.path)
        own = getattr(module, "config", None) if item.path else None
        own = own if isinstance(own, PretrainedConfig) else config
        inside = any(not p or item.path == p or item.path.startswith(f"{p}.") for p in rotaries)
        if item.cross:
            scale: tuple[str, ...] = ("scale",)
        elif inside:
            scale = rotary_terms(own, item.layer)
        else:
            scale = ("scale",) + window(own, item.layer)
        terms[item.path] = observed.terms(template(item.path), scale, module)
    return terms


def _temperature(found: Found) -> tuple[str, ...]:
    return ("query_temperature",) if found.temperature else ()


def content_biases(model: torch.nn.Module, items: list[Found | Skipped]) -> dict[str, str]:
    """By attention path: the module's own parameter (``CONTENT_BIAS``, one value per head dim) that it
    adds to q."""
    biases = {}
    for item in items:
        if isinstance(item, Found) and not item.latent and not item.fused:
            for name, param in model.get_submodule(item.path).named_parameters(recurse=False):
                if CONTENT_BIAS.search(name) and param.numel() == item.n_heads * item.head_dim:
                    biases[item.path] = name
    return biases


def discovered_layers(
    config: PretrainedConfig,
    reader: TensorReader,
    items: list[Found | Skipped],
    terms: dict[str, tuple[str, ...]],
    biases: dict[str, str] | None = None,
) -> Iterator[AttentionLayer | UnscoredLayer]:
    """The layers of ``items`` read from ``reader`` (by the model's own parameter names); ``terms``: what
    each form leaves out (``layer_terms``); ``biases``: the content biases of ``content_biases``."""
    from ..qk_norms import QK_LAYERNORM, QK_NORM_PER_HEAD, QK_NORM_WHOLE, normalised

    def get(name: str) -> torch.Tensor:
        tensor = reader.get(name)
        return tensor[..., 0] if tensor.dim() == 3 and tensor.shape[-1] == 1 else tensor  # a pointwise conv

    def split(item: Found, suffix: str, role: int) -> torch.Tensor:
        tensor = get(f"{item.q}.{suffix}")
        if item.transposed and suffix == "weight":
            tensor = tensor.T  # a Conv1D's inputs × outputs, as nn.Linear's outputs × inputs
        h, kv, d = item.n_heads, item.n_kv_heads, item.head_dim
        if item.fused == "blocks":
            return tensor[: h * d] if role == 0 else tensor[h * d : (h + kv) * d]
        if item.fused == "groups_qvk":  # per group [q_g | v_g | k_g]
            grouped = tensor.reshape(item.groups, 3, h * d // item.groups, *tensor.shape[1:])
            return grouped[:, (0, 2)[role]].reshape(h * d, *tensor.shape[1:])
        per_head = tensor.reshape(h, 3, d, *tensor.shape[1:])[:, role]
        return per_head.reshape(h * d, *tensor.shape[1:])

    def key(item: Found, suffix: str) -> torch.Tensor:
        return split(item, suffix, 1) if item.fused else diagonal(item, get(f"{item.k}.{suffix}"))

    def diagonal(item: Found, tensor: torch.Tensor) -> torch.Tensor:
        """A grouped convolution's weight [outputs × inputs/groups] as its block-diagonal linear map."""
        if item.blocks == 1 or tensor.dim() != 2:
            return tensor
        return torch.block_diag(*tensor.reshape(item.blocks, -1, tensor.shape[1]))

    def query(item: Found, suffix: str) -> torch.Tensor:
        if item.fused:
            return split(item, suffix, 0)
        tensor = diagonal(item, get(f"{item.q}.{suffix}"))
        if not item.gated:
            return tensor
        per_head = tensor.reshape(item.n_heads, 2 * item.head_dim, *tensor.shape[1:])
        return per_head[:, : item.head_dim].reshape(item.n_heads * item.head_dim, *tensor.shape[1:])

    for item in items:
        if isinstance(item, Skipped):
            yield UnscoredLayer(item.stack, item.layer, f"{item.mixer}: {item.why}")
            continue
        if item.latent:
            from ..mla import mla_layer

            text = config.get_text_config()
            for layer in mla_layer(text, reader, item.path, item.layer, item.stack, item.rope_norm):
                yield replace(layer, left_out=layer.left_out + _temperature(item))
            continue
        if item.inner:
            yield _composed_layer(item, reader, terms[item.path])
            continue
        b_q = query(item, "bias") if item.q_bias else None
        u_name = (biases or {}).get(item.path)
        if u_name:  # u is added to every query: part of its bias; the position term is left out
            u = get(f"{item.path}.{u_name}").flatten()
            b_q = u if b_q is None else b_q + u
        bias = ("bias",) if b_q is not None or item.k_bias else ()
        relative = ("relative_position",) if u_name else ()
        left_out = tuple(dict.fromkeys(bias + terms[item.path] + relative + _temperature(item)))
        layer = AttentionLayer(
            stack=item.stack,
            layer=item.layer,
            w_q=linear(query(item, "weight")),
            w_k=linear(key(item, "weight")),
            b_q=b_q,
            b_k=key(item, "bias") if item.k_bias else None,
            n_heads=item.n_heads,
            n_kv_heads=item.n_kv_heads,
            head_dim=item.head_dim,
            left_out=left_out,
            cross=item.cross,
        )
        scale = (
            torch.nn.functional.softplus(get(f"{item.path}.{item.q_scale}").double())
            if item.q_scale
            else None
        )
        if scale is not None and item.q_norm is None:
            per_row = scale.repeat(item.n_heads)
            b_q = None if layer.b_q is None else layer.b_q * per_row
            layer = replace(layer, w_q=layer.w_q * per_row, b_q=b_q)
        if item.q_norm is not None and item.k_norm is not None:
            q_gain, k_gain = (
                get(f"{item.path}.{n.name}.weight") + n.offset
                if n.weight
                else torch.ones(item.head_dim, dtype=torch.float64)
                for n in (item.q_norm, item.k_norm)
            )
            if scale is not None:  # after the norm: one more gain
                q_gain = q_gain * (
                    scale if q_gain.dim() == 2 else scale.repeat(q_gain.numel() // item.head_dim)
                )
            per_head = q_gain.numel() == item.head_dim or q_gain.dim() == 2  # shared, or one per head
            form = QK_NORM_PER_HEAD if per_head else QK_NORM_WHOLE
            form = QK_LAYERNORM if per_head and item.q_norm.centre else form
            layer = normalised(
                layer,
                q_gain,
                k_gain,
                form,
                item.q_norm.centre,
                item.q_norm.bias or item.k_norm.bias,
                whole=form == QK_NORM_WHOLE,  # a norm with a gain as wide as the projection spans it
            )
        yield layer


def _composed_layer(item: Found, reader: TensorReader, terms: tuple[str, ...]) -> AttentionLayer:
    """The form of q/k projections followed by ``nn.MultiheadAttention``'s own input projections (rows
    [q; k; v] of ``in_proj_weight``, else ``q_proj_weight`` and ``k_proj_weight``): x W_q W_in,q, the
    first map's bias carried through the second."""
    inner = f"{item.path}.{item.inner}" if item.path else item.inner
    width = item.n_heads * item.head_dim
    maps = []
    for role, (name, has_bias) in enumerate(((item.q, item.q_bias), (item.k, item.k_bias))):
        rows = slice(role * width, (role + 1) * width)
        packed = reader.has(f"{inner}.in_proj_weight")
        second = linear(
            reader.get(f"{inner}.in_proj_weight")[rows]
            if packed
            else reader.get(f"{inner}.{'qk'[role]}_proj_weight")
        )
        bias = reader.get(f"{name}.bias") @ second if has_bias and reader.has(f"{name}.bias") else None
        if reader.has(f"{inner}.in_proj_bias"):
            own = reader.get(f"{inner}.in_proj_bias")[rows]
            bias = own if bias is None else bias + own
        maps.append((linear(reader.get(f"{name}.weight")) @ second, bias))
    (w_q, b_q), (w_k, b_k) = maps
    bias = ("bias",) if b_q is not None or b_k is not None else ()
    return AttentionLayer(
        stack=item.stack,
        layer=item.layer,
        w_q=w_q,
        w_k=w_k,
        b_q=b_q,
        b_k=b_k,
        n_heads=item.n_heads,
        n_kv_heads=item.n_kv_heads,
        head_dim=item.head_dim,
        left_out=tuple(dict.fromkeys(bias + terms)),
        cross=item.cross,
    )


def discover(config: PretrainedConfig, layout: str = "", observed: Observed | None = None) -> Architecture:
    """The architecture of ``config`` as its meta-device model shows it (raises ``ArchitectureError``).

    ``layout``: the row order of fused q/k/v projections (one of ``LAYOUTS``; without it, fused
    projections are not read); ``observed``: what the conformance run saw in the forward pass (which
    forms are cross, the objective, the checkpoint class it built)."""
    observed = observed or Observed()
    model = None
    if not observed.model_class and (declared := declared_class(config)):
        try:  # the checkpoint's own class: the stacks it holds (an encoder alone, a decoder alone)
            model = meta_model(config, declared)
        except Exception:  # noqa: BLE001 — a class this config does not build: the base model
            model = None
    try:
        model = model or meta_model(config, observed.model_class)
    except Exception as err:  # transformers raises many kinds for configs it cannot build
        raise ArchitectureError(f"transformers cannot build it ({type(err).__name__})") from err
    items = [_validated(item, observed, model) for item in find_attention(model, config, layout, observed)]
    if not any(isinstance(item, Found) for item in items):
        raise ArchitectureError("no attention module with separate query and key projections")
    terms = layer_terms(model, config, items, observed)
    biases = content_biases(model, items)
    stacks = tuple(dict.fromkeys(item.stack for item in items if isinstance(item, Found)))
    return Architecture(
        model_types=(config.model_type,),
        modality=_modality(model, stacks),
        objective=observed.objective or "bidirectional",
        layers=lambda cfg, reader: discovered_layers(cfg, Converted(reader, model), items, terms, biases),
        n_layers=lambda cfg: sum(i.forms if isinstance(i, Found) else 1 for i in items),
        notes=_notes(model, items),
        stacks=stacks,
        stack_modality={s: m for s in stacks if (m := _stack_modality(s))},
    )


def _validated(item: Found | Skipped, observed: Observed, model: torch.nn.Module) -> Found | Skipped:
    """``item``, or an unscored layer where the run validated no module of its template."""
    if isinstance(item, Skipped) or observed.validated(template(item.path)):
        return item
    return Skipped(item.stack, item.layer, type(model.get_submodule(item.path)).__name__, UNSEEN)


def _notes(model: torch.nn.Module, items: list[Found | Skipped]) -> str:
    """``discovered``, and the attention modules discovery leaves unscored (no separate q/k projections;
    the mixers of unscored layers say why themselves, layer by layer)."""
    paths = [item.path for item in items if isinstance(item, Found)]
    mixers = {item.mixer for item in items if isinstance(item, Skipped)}
    missed = []
    for path, module in model.named_modules():
        name = type(module).__name__
        if (
            "Attention" not in name
            or re.search(r"MLP|Mlp|FeedForward", name)  # an attention block's feed-forward (EdgeTAM's)
            or name in mixers
            or any(p == path or p.startswith(path + ".") or path.startswith(p + ".") for p in paths)
        ):
            continue
        if not any(isinstance(c, torch.nn.Linear) for c in module.modules()):
            continue
        missed.append(name)
    scaled = (
        "; q's learned per-dimension scale (softplus) folded into W_q"
        if any(isinstance(item, Found) and item.q_scale for item in items)
        else ""
    )
    headless = [
        f"{i.mixer} ({i.why})" for i in items if isinstance(i, Skipped) and i.why in (HEADLESS, SCORER)
    ]
    scaled += f"; not scored: {', '.join(dict.fromkeys(headless))}" if headless else ""
    composed = [f"`{i.path}`" for i in items if isinstance(i, Found) and i.inner]
    scaled += (
        f"; {', '.join(composed)}: q and k projected again by its nn.MultiheadAttention (the composed maps)"
        if composed
        else ""
    )
    if not missed:
        return "discovered" + scaled
    return f"discovered{scaled}; not scored: {', '.join(dict.fromkeys(missed))} (no separate q/k projections)"


def _stack_modality(stack: str) -> str | None:
    for word, modality in (
        ("vision", "vision"),
        ("visual", "vision"),
        ("image", "vision"),
        ("audio", "audio"),
    ):
        if word in stack:
            return modality
    return "language" if re.search("text|language", stack) else None


def _modality(model: torch.nn.Module, stacks: tuple[str, ...]) -> str:
    """``multimodal`` where the stacks' names say two modalities or the model reads text beside a medium
    (``documented.text_and_media``: Florence-2, UDOP, ViLT, Granite Speech, Kyutai's speech-to-text), else
    the modality of the model's main input (``main_input``: images, patches or videos; audio; else
    language)."""
    from .documented import text_and_media

    kinds = {_stack_modality(s) for s in stacks} - {None}
    if len(kinds) > 1 or text_and_media(model):
        return "multimodal"
    main = main_input(model)
    if re.search("pixel|image|video|patches", main) or kinds == {"vision"}:
        return "vision"
    if main in ("input_features", "input_values") or "audio" in main or kinds == {"audio"}:  # audio_mel
        return "audio"
    return "language"
