"""What an architecture map yields: the query/key factors of every attention layer.

An architecture is a function ``(config, reader) -> iterator of AttentionLayer``. It asks the reader
only for the tensors it needs, so a lazy source reads (or downloads) nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch

from ..errors import InputError

if TYPE_CHECKING:
    from transformers import PretrainedConfig


class ArchitectureError(InputError):
    """The model cannot be scored as asked (unsupported family, missing tensor, bad shapes)."""


class TensorReader(Protocol):
    """Tensors by name. Names are matched exactly or as a dotted suffix (any prefix such as ``model.``)."""

    def get(self, *names: str) -> torch.Tensor:
        """The first of ``names`` that exists (alternatives cover on-disk vs in-memory spellings)."""
        ...

    def has(self, name: str) -> bool: ...


@dataclass(frozen=True)
class AttentionLayer:
    """The bilinear form of one layer in the x W convention: q = x W_q + b_q, k = x W_k + b_k.

    ``w_q`` is d × (H·d_h), ``w_k`` is d × (H_kv·d_h), heads head-major along the columns; query head h
    reads kv head h // (H / H_kv). A ``cross`` layer (decoder queries × encoder keys) maps between two
    spaces: ``w_k`` may have a different number of rows, and symmetry is not defined for it.
    """

    stack: str
    layer: int
    w_q: torch.Tensor
    w_k: torch.Tensor
    n_heads: int
    n_kv_heads: int
    head_dim: int
    b_q: torch.Tensor | None = None
    b_k: torch.Tensor | None = None
    left_out: tuple[str, ...] = ()
    form: str = "standard"
    """``standard`` when x W_q W_kᵀ xᵀ (+ bias terms) is the raw attention score; otherwise what is scored."""
    cross: bool = False

    def __post_init__(self) -> None:
        d = self.w_q.shape[0]
        expected_q = (d, self.n_heads * self.head_dim)
        expected_k = (self.w_k.shape[0] if self.cross else d, self.n_kv_heads * self.head_dim)
        if tuple(self.w_q.shape) != expected_q or tuple(self.w_k.shape) != expected_k:
            raise ArchitectureError(
                f"{self.stack} layer {self.layer}: W_q {tuple(self.w_q.shape)} / W_k {tuple(self.w_k.shape)} "
                f"do not match {self.n_heads} heads, {self.n_kv_heads} kv heads of dim {self.head_dim}"
            )
        if self.cross and "cross" not in self.stack:
            raise ArchitectureError(
                f"cross-attention stack {self.stack!r} must have 'cross' in its name: "
                "the tables keep such stacks out of the self-attention medians by name"
            )
        if self.n_heads % self.n_kv_heads:
            raise ArchitectureError(
                f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}"
            )


@dataclass(frozen=True)
class UnscoredLayer:
    """A layer whose mixing is not a bilinear form of its input (a Mamba block, linear attention).

    An architecture yields it in layer order beside the ``AttentionLayer`` items, so the record says the
    layer exists and why it has no scores, and the model's other layers are still scored.
    """

    stack: str
    layer: int
    reason: str


LayersFn = Callable[["PretrainedConfig", TensorReader], Iterator[AttentionLayer | UnscoredLayer]]


@dataclass(frozen=True)
class Architecture:
    """How one family lays out q and k, and what kind of model it is."""

    model_types: tuple[str, ...]
    modality: str  # language | vision | audio | multimodal
    objective: str  # bidirectional | autoregressive | encoder-decoder
    layers: LayersFn
    n_layers: Callable[[PretrainedConfig], int]
    """How many items ``layers`` yields, attention and unscored layers alike (for the progress bar)."""
    notes: str = ""
    stacks: tuple[str, ...] = field(default=("self",))
    stack_modality: Mapping[str, str] = field(default_factory=dict)
    """Per-stack modality where it differs from ``modality`` (e.g. CLIP's text and vision towers)."""
    why: str = ""
    """A hand-written table's reason to exist, in one line: what discovery cannot see for its types (empty
    for a layout discovery found)."""

    def modality_of(self, stack: str) -> str:
        return self.stack_modality.get(stack, self.modality)

    def objective_of(self, config: PretrainedConfig) -> str:
        """The training objective of this checkpoint (``objective_in``)."""
        return objective_in(self.objective, config)


def objective_in(objective: str, config: PretrainedConfig) -> str:
    """A family's ``objective`` as ``config`` runs it: an encoder family run as a causal decoder
    (``is_decoder``) is autoregressive, a decoder family run without its causal mask
    (``use_bidirectional_attention`` True, EmbeddingGemma's, or "all", Gemma 4's) is bidirectional; Gemma 4's
    "vision" keeps text causal (only an image's tokens see each other both ways)."""
    if objective == "bidirectional" and getattr(config, "is_decoder", False):
        return "autoregressive"
    if objective == "autoregressive" and getattr(config, "use_bidirectional_attention", None) in (
        True,
        "all",
    ):
        return "bidirectional"
    return objective


def linear(weight: torch.Tensor) -> torch.Tensor:
    """x W form of an ``nn.Linear`` weight (rows of ``weight`` are outputs); anything but a matrix is an
    error (torch's ``.T`` of it would warn, then the shapes fail to match further on)."""
    if weight.ndim != 2:
        raise ArchitectureError(f"a q/k weight of shape {tuple(weight.shape)} is not a matrix")
    return weight.T


def head_dim_of(config: PretrainedConfig, n_heads: int) -> int:
    """``head_dim`` from the config where it is set (Gemma, Qwen3 ...), else hidden / heads."""
    explicit = getattr(config, "head_dim", None)
    return int(explicit) if explicit else config.hidden_size // n_heads


def separate_qk(
    reader: TensorReader, q_name: str, k_name: str, q_bias: bool = True, k_bias: bool = True
) -> dict[str, torch.Tensor | None]:
    """W_q, W_k (and the biases asked for) of two separate ``nn.Linear`` projections, in x W form."""
    return {
        "w_q": linear(reader.get(f"{q_name}.weight")),
        "w_k": linear(reader.get(f"{k_name}.weight")),
        "b_q": reader.get(f"{q_name}.bias") if q_bias else None,
        "b_k": reader.get(f"{k_name}.bias") if k_bias else None,
    }


def fused_qkv(weight: torch.Tensor, bias: torch.Tensor | None) -> dict[str, torch.Tensor | None]:
    """W_q, W_k (and biases) of a fused ``nn.Linear`` ``[q | k | v]`` (output rows in three equal blocks)."""
    w_q, w_k, _ = weight.chunk(3, dim=0)
    b_q, b_k = (None, None) if bias is None else bias.chunk(3, dim=0)[:2]
    return {"w_q": linear(w_q), "w_k": linear(w_k), "b_q": b_q, "b_k": b_k}


def fused_layers(
    reader: TensorReader,
    name: str,
    n_layers: int,
    heads: int,
    head_dim: int,
    has_bias: bool,
    left_out: tuple[str, ...],
    kv_heads: int | None = None,
    split: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
    *,
    stack: str,
) -> Iterator[AttentionLayer]:
    """Layer i reads a fused ``nn.Linear`` ``name`` (``{i}`` the layer) whose rows ``split`` sorts into
    (q rows, k rows): by default three equal blocks ``[q | k | v]``; with ``has_bias``, its bias is split
    alike and ``bias`` heads ``left_out``. ``kv_heads``: as many as ``heads`` unless given."""
    split = split or (lambda fused: fused.chunk(3, dim=0)[:2])
    for i in range(n_layers):
        w_q, w_k = split(reader.get(name.format(i=i) + ".weight"))
        b_q, b_k = split(reader.get(name.format(i=i) + ".bias")) if has_bias else (None, None)
        yield AttentionLayer(
            stack=stack,
            layer=i,
            w_q=linear(w_q),
            w_k=linear(w_k),
            b_q=b_q,
            b_k=b_k,
            n_heads=heads,
            n_kv_heads=kv_heads or heads,
            head_dim=head_dim,
            left_out=(("bias",) if has_bias else ()) + left_out,
        )


def separate_layers(
    config: PretrainedConfig,
    reader: TensorReader,
    prefixes: str | Iterable[str],
    q: str,
    k: str,
    *,
    stack: str,
    left_out: tuple[str, ...],
    bias: bool = True,
    n_kv_heads: int | None = None,
    head_dim: int | None = None,
) -> Iterator[AttentionLayer]:
    """Layer i reads ``{prefix_i}.{q}`` and ``{prefix_i}.{k}``: separate q/k ``nn.Linear`` projections.

    ``prefixes``: the prefixes in layer order, or one pattern with ``{i}`` (``config.num_hidden_layers``
    layers). ``config.num_attention_heads`` query heads (``n_kv_heads``: as many unless given) of width
    ``head_dim`` (hidden / heads unless given); with ``bias``, both biases are read and ``bias`` heads
    ``left_out``.
    """
    if isinstance(prefixes, str):
        prefixes = [prefixes.format(i=i) for i in range(config.num_hidden_layers)]
    heads = config.num_attention_heads
    for i, prefix in enumerate(prefixes):
        yield AttentionLayer(
            stack=stack,
            layer=i,
            **separate_qk(reader, f"{prefix}.{q}", f"{prefix}.{k}", bias, bias),
            n_heads=heads,
            n_kv_heads=n_kv_heads or heads,
            head_dim=head_dim or config.hidden_size // heads,
            left_out=(("bias",) if bias else ()) + left_out,
        )
