"""Discovery: the attention layout of a ``model_type`` without a table, read off the model itself.

transformers builds the model from its config on the meta device (no weights, no memory, no remote
code). Its modules are walked: a module with a query and a key projection (``q_proj``/``k_proj`` and
the other spellings of ``PAIRS``) is an attention; the projections' parameter names are the checkpoint
tensor names (the reader matches them as dotted suffixes, so ``model.`` and the task heads' prefixes
do not matter); the head width comes from the module (``head_dim``) or the config, and the head counts
from the projections' widths. A q/k norm beside the projections is probed on a copy of the module (is
its gain ``w`` or ``1 + w``, does it centre) and folded in as ``normalised_decoders`` does. A layer of a
stack that holds no attention (a Mamba mixer, linear attention, a convolution) is an ``UnscoredLayer``.

``discovered`` turns what is found into the ``Architecture`` the engine consumes. A discovered layout is
used only for the model types that the generated conformance run (``conformance``, ``support.json``)
scored and validated against a forward pass of a random model; everything else is refused with the
reason that run recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ..base import ArchitectureError, objective_in
from ..mla import latent_query
from ..qk_norms import Norm, qk_norms, query_scale, rope_key_norm
from .form_checks import single_form
from .model_classes import (
    WORD,
    checkpoint_classes,
    class_of_type,
    family_words,
    mapped_class,
    own_model_class,
)
from .observed import Observed
from .projections import inputs, projection
from .projections import is_conv1d as _conv1d
from .projections import is_linear as _linear
from .projections import rows as _rows
from .recurrence import gated_recurrence as recurrent
from .stacks import Placed, place, template
from .temperature import query_temperature

if TYPE_CHECKING:
    from transformers import PretrainedConfig

PAIRS = (
    ("q_proj", "k_proj"),
    ("query", "key"),
    ("q", "k"),
    ("wq", "wk"),
    ("query_proj", "key_proj"),
    ("q_lin", "k_lin"),
    ("to_q", "to_k"),
    ("Wq", "Wk"),
    ("q_linear", "k_linear"),
    ("linear_q", "linear_k"),
    ("project_q", "project_k"),
)
"""Child names of separate query and key projections."""
FUSED = ("qkv_proj", "query_key_value", "Wqkv", "qkv", "W_pack", "qkv_linear", "to_qkv", "c_attn", "att_proj")
"""Child names of one linear projection yielding q, k and v together."""
LAYOUTS = ("blocks", "per_head", "groups_qvk")
"""How a fused projection's output rows are ordered: [q | k | v] (q: H·d_h rows, k and v: H_kv·d_h each),
per head [q_h | k_h | v_h] (as many kv heads as heads), or in the module's ``mp_num`` model-parallel groups
[q_g | v_g | k_g] of H/mp_num heads each (CodeGen). The conformance run records which one gives the
model's own q and k; discovery uses only that one."""
HEADLESS = "no head width to read"
"""q/k projections without a head width or count: an unscored layer beside other attention, else refused."""
SCORER = "q·k scores as its output, no value or output projection: a pairwise scorer, not an attention"
"""Said of a module whose q·k scores are its output (PP-DocLayout's reading-order pointers): as HEADLESS."""
NOT_SOFTMAX = re.compile(r"^(Text)?((Linear|Delta|Lightning)\w*Attention|GatedDeltaNet)$")
"""Mixers named (after the family prefix) linear, delta-rule or lightning attention, q·k fed to a recurrence
or kernel, never softmax(q·k) (Kimi-Linear's, MiniMax's layers; xLSTM's gated ones: ``recurrent``)."""


@dataclass(frozen=True)
class Found:
    """One attention module of the base model and where its q/k tensors are."""

    path: str
    stack: str
    layer: int
    q: str
    k: str
    head_dim: int
    n_heads: int
    n_kv_heads: int
    q_bias: bool
    k_bias: bool
    cross: bool
    q_norm: Norm | None = None
    k_norm: Norm | None = None
    gated: bool = False
    """The q projection yields [q_h | gate_h] per head (Qwen3-Next's output gate); q is each first half."""
    fused: str = ""
    """The layout of ``LAYOUTS`` when q and k come from one projection (``q`` and ``k`` then name it)."""
    groups: int = 1
    """The fused projection's model-parallel groups (layout ``groups_qvk``)."""
    transposed: bool = False
    """The projection is a ``Conv1D`` (GPT-2's): its weight is stored in the x W convention, inputs × outputs."""
    blocks: int = 1
    """A grouped pointwise convolution's groups: its weight is the diagonal blocks of the linear map."""
    latent: bool = False
    """Multi-head latent attention (``mla.mla_layer``): a content and a rotary form."""
    rope: bool = True
    """A latent attention's decoupled rotary part exists (GLM-5-Next's has none: ``qk_rope_head_dim`` 0)."""
    q_scale: str = ""
    """The module's parameter s whose softplus multiplies q per head dim (``query_scale``): W_q·diag(s)."""
    rope_norm: Norm | None = None
    """A latent attention's norm of its rotary key alone (Dots 3's), folded into that key's projection."""
    temperature: str = ""  # the child rescaling q by position (``temperature``): left out as rotary is
    inner: str = ""
    """An ``nn.MultiheadAttention`` child that maps the projections' outputs again (its input projections)
    before q·kᵀ (Aria's projector): the form is the composition, with that module's heads."""

    def local(self, name: str) -> str:
        """The path of projection ``name`` (``q`` or ``k``) inside the attention module (``q_proj.linear``)."""
        return name.removeprefix(f"{self.path}.") if self.path else name

    @property
    def forms(self) -> int:
        """The layers it yields: a latent attention's content and rotary forms, else one."""
        return 2 if self.latent and self.rope else 1


@dataclass(frozen=True)
class Skipped:
    """A layer of a stack with attention elsewhere whose own mixer is not a dot-product attention."""

    stack: str
    layer: int
    mixer: str
    why: str = "not a dot-product attention"


def model_class(model_type: str, name: str = "") -> type:
    """The class that builds ``model_type``: its base model (``AutoModel``), else the first task class an
    auto mapping names for it (ColPali's retrieval model, ...); ``name``: the checkpoint class of that
    name (``checkpoint_classes``, or a class of transformers for this type's config: Switch's encoder)."""
    if name:
        found = next((c for c in checkpoint_classes(model_type) if c.__name__ == name), None)
        found = found or class_of_type(model_type, name)
        if found is None:
            raise ArchitectureError(f"transformers defines no {name} for it")
        return found
    own = mapped_class(model_type) or own_model_class(model_type)
    if own is None:
        raise ArchitectureError("transformers defines no model for it (a configuration and processor only)")
    return own


def meta_model(config: PretrainedConfig, name: str = "") -> torch.nn.Module:
    """The model of ``config`` on the meta device (``model_class``; no weights are allocated)."""
    from transformers import AutoModel

    cls = model_class(config.model_type, name)
    with torch.device("meta"):
        if cls is AutoModel:
            return cls.from_config(config, trust_remote_code=False)
        return cls._from_config(config)


def _head_dim(module: torch.nn.Module, config: PretrainedConfig, q_width: int) -> int | None:
    for name in ("head_dim", "attention_head_size", "head_size", "d_head", "dim_head"):
        value = getattr(module, name, None)
        if isinstance(value, int) and value > 0:
            return value
    for name in ("num_heads", "num_attention_heads", "n_heads", "n_head", "heads"):
        value = getattr(module, name, None)
        if isinstance(value, int) and value > 0 and q_width % value == 0:
            return q_width // value
    return None


def find_attention(
    model: torch.nn.Module, config: PretrainedConfig, layout: str = "", observed: Observed | None = None
) -> list[Found | Skipped]:
    """Every attention module with separate q/k projections, grouped into stacks (``stacks.place``: a
    form is cross where ``observed`` says its keys read another input than its queries), and the unscored
    layers of a stack whose layer list holds other mixers too."""
    raw: list[tuple[str, str, str, torch.nn.Module]] = []
    family = family_words(model)
    for path, module in model.named_modules():
        if NOT_SOFTMAX.search("".join(WORD.findall(type(module).__name__)[family:])) or recurrent(module):
            continue  # its layers are recorded as unscored, with this class as their mixer
        if _linear(getattr(module, "kv_a_proj_with_mqa", None)) and _linear(
            getattr(module, "kv_b_proj", None)
        ):
            q_name = "q_a_proj" if _linear(getattr(module, "q_a_proj", None)) else "q_proj"
            raw.append((path, q_name, "kv_a_proj_with_mqa", module))
            continue
        for q, k in PAIRS:
            q_path, k_path = projection(module, q), projection(module, k)
            if q_path and k_path:
                raw.append((path, q_path, k_path, module))
                break
        else:
            fused = next((n for n in FUSED if _linear(p := getattr(module, n, None)) or _conv1d(p)), None)
            if fused and layout and path:
                raw.append((path, fused, fused, module))
    observed = observed or Observed()
    cross = [  # keys of another width read another input, seen or not
        observed.is_cross(template(path), module) or _width(module, q) != _width(module, k)
        for path, q, k, module in raw
    ]
    objective = objective_in(observed.objective, config)
    # a config that overrides what the run saw (Gemma 3's use_bidirectional_attention) is trusted over it
    causal = observed.causal if objective == observed.objective else frozenset()
    placed, gaps, order = place(model, [path for path, *_ in raw], cross, objective, causal)
    found: list[Found | Skipped] = []
    unscorable: list[ArchitectureError] = []
    for (path, q, k, module), where, is_cross in zip(raw, placed, cross, strict=True):
        try:
            found.append(_found(config, path, q, k, module, where, is_cross, layout if q == k else ""))
        except ArchitectureError as err:  # unscored where other attention modules are scored
            why = next((w for w in (HEADLESS, SCORER) if str(err).endswith(w)), None)
            if why is None:
                raise
            unscorable.append(err)
            found.append(Skipped(where.stack, where.layer, type(module).__name__, why))
    if unscorable and not any(isinstance(f, Found) for f in found):
        raise unscorable[0]
    scored = {f.stack for f in found if isinstance(f, Found)}
    found += [Skipped(gap.stack, gap.layer, _mixer(gap.block)) for gap in gaps if gap.stack in scored]
    found.sort(key=lambda f: (order.index(f.stack), f.layer))
    return found


def _width(module: torch.nn.Module, name: str) -> int:
    return inputs(module.get_submodule(name))


def _fused_heads(module: torch.nn.Module, config, width: int, layout: str) -> tuple[int, int, int]:
    """Head width, heads and kv heads of a fused projection of ``width`` output rows."""
    own = getattr(module, "config", None) or config
    heads = next(
        (
            v
            for n in ("num_heads", "num_attention_heads", "n_heads", "n_head")
            if isinstance(v := getattr(module, n, None), int)
        ),
        getattr(own, "num_attention_heads", None),
    )
    head_dim = _head_dim(module, config, width // 3)
    if not isinstance(heads, int) or heads <= 0:
        raise ArchitectureError(f"{type(module).__name__}: no head count to read")
    head_dim = head_dim or width // 3 // heads
    kv = (width // head_dim - heads) // 2 if layout == "blocks" else heads
    groups = getattr(module, "mp_num", None)
    if layout == "groups_qvk" and not (isinstance(groups, int) and groups > 0 and heads % groups == 0):
        raise ArchitectureError(f"{type(module).__name__}: no mp_num groups of its {heads} heads")
    return head_dim, heads, kv


def _found(
    config, path: str, q: str, k: str, module: torch.nn.Module, where: Placed, cross: bool, layout: str
) -> Found:
    stack, index = where.stack, where.layer
    q_mod, k_mod = module.get_submodule(q), module.get_submodule(k)
    if k == "kv_a_proj_with_mqa":
        own = getattr(module, "config", None) or config
        latent_query(module, q)
        return Found(
            path=path,
            stack=stack,
            layer=index,
            q=f"{path}.{q}",
            k=f"{path}.{k}",
            head_dim=own.qk_nope_head_dim,
            n_heads=own.num_attention_heads,
            n_kv_heads=own.num_attention_heads,
            q_bias=False,
            k_bias=False,
            cross=cross,
            latent=True,
            rope=bool(own.qk_rope_head_dim),
            rope_norm=rope_key_norm(module),
            temperature=query_temperature(module),
        )
    if layout:
        head_dim, n_heads, n_kv = _fused_heads(module, config, _rows(q_mod), layout)
        q_norm, k_norm = qk_norms(module, head_dim)
        return Found(
            path=path,
            stack=stack,
            layer=index,
            q=f"{path}.{q}",
            k=f"{path}.{k}",
            head_dim=head_dim,
            n_heads=n_heads,
            n_kv_heads=n_kv,
            q_bias=q_mod.bias is not None,
            k_bias=q_mod.bias is not None,
            cross=cross,
            q_norm=q_norm,
            k_norm=k_norm,
            fused=layout,
            groups=getattr(module, "mp_num", 1) if layout == "groups_qvk" else 1,
            transposed=_conv1d(q_mod),
        )
    if {n for n, c in module.named_children() if _linear(c) or _conv1d(c)} == {q, k}:
        raise ArchitectureError(f"{type(module).__name__} at {path}: {SCORER}")
    inner = next((n for n, c in module.named_children() if isinstance(c, torch.nn.MultiheadAttention)), "")
    if inner:
        return _composed(path, q, k, module, where, cross, inner)
    head_dim = _head_dim(module, config, _rows(q_mod))
    if head_dim is None:
        raise ArchitectureError(f"{type(module).__name__} at {path}: {HEADLESS}")
    single_form(module, q, k)
    q_norm, k_norm = qk_norms(module, head_dim, (q_mod, k_mod))
    n_heads = _rows(q_mod) // head_dim
    stated = getattr(getattr(module, "config", None) or config, "num_attention_heads", None)
    gated = isinstance(stated, int) and n_heads == 2 * stated
    return Found(
        path=path,
        stack=stack,
        layer=index,
        q=f"{path}.{q}" if path else q,
        k=f"{path}.{k}" if path else k,
        head_dim=head_dim,
        n_heads=n_heads // 2 if gated else n_heads,
        n_kv_heads=_rows(k_mod) // head_dim,
        q_bias=q_mod.bias is not None,
        k_bias=k_mod.bias is not None,
        cross=cross,
        q_norm=q_norm,
        k_norm=k_norm,
        gated=gated,
        blocks=getattr(q_mod, "groups", 1) if isinstance(q_mod, torch.nn.Conv1d) else 1,
        q_scale=query_scale(module, head_dim),
        temperature=query_temperature(module),
    )


def _composed(
    path: str, q: str, k: str, module: torch.nn.Module, where: Placed, cross: bool, inner: str
) -> Found:
    """q and k projections whose outputs an ``nn.MultiheadAttention`` child projects again: its heads,
    and a bias where either map has one."""
    mha = module.get_submodule(inner)
    q_mod, k_mod = module.get_submodule(q), module.get_submodule(k)
    own_bias = mha.in_proj_bias is not None
    return Found(
        path=path,
        stack=where.stack,
        layer=where.layer,
        q=f"{path}.{q}" if path else q,
        k=f"{path}.{k}" if path else k,
        head_dim=mha.head_dim,
        n_heads=mha.num_heads,
        n_kv_heads=mha.num_heads,
        q_bias=q_mod.bias is not None or own_bias,
        k_bias=k_mod.bias is not None or own_bias,
        cross=cross,
        inner=inner,
    )


def _mixer(block: torch.nn.Module) -> str:
    """The class name of a block's token mixer (its first child that is not a norm or a feed-forward)."""
    for child in block.children():
        name = type(child).__name__
        if not re.search(r"Norm|MLP|Mlp|FeedForward|MoE|Moe|Dropout|Identity", name):
            return name
    return type(block).__name__
