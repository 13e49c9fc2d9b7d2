"""A reader that gives a discovered model's in-memory tensor names from a checkpoint saved in another layout.

transformers saves many families under other names than its modules use, and some in other shapes: a
fused ``qkv_proj`` (or ``gqkv_proj``, ``Wqkv``) its loader chunks into ``q_proj``/``k_proj``/``v_proj``,
a legacy prefix, rotary-permuted rows. Its own loading rules (the checkpoint conversion mapping) say how
each checkpoint tensor becomes a parameter; ``Converted`` applies them, for only the tensors asked for.
"""

from __future__ import annotations

from copy import deepcopy
from typing import TYPE_CHECKING

from ..base import ArchitectureError

if TYPE_CHECKING:
    import torch

    from ..base import TensorReader


class Converted:
    """``reader`` as ``model``'s parameters are named: a name the checkpoint holds is read as is; another
    is made by transformers' conversion of the checkpoint tensors it comes from."""

    def __init__(self, reader: TensorReader, model: torch.nn.Module) -> None:
        self._reader, self._model = reader, model
        self._plan: dict[str, tuple[object, dict[str, list[str]], str]] | None = None
        self._made: dict[str, torch.Tensor] = {}

    def __getattr__(self, name: str):  # config, names, ... of the reader
        return getattr(self._reader, name)

    def has(self, name: str) -> bool:
        return self._reader.has(name) or name in self._made or name in self._targets()

    def get(self, *names: str) -> torch.Tensor:
        for name in names:
            if self._reader.has(name):
                return self._reader.get(name)
        for name in names:
            if name in self._targets() and name not in self._made:
                self._convert(name)
            if name in self._made:
                return self._made[name]
        return self._reader.get(*names)  # the reader's own error

    def _targets(self) -> dict[str, tuple[object, dict[str, list[str]], str]]:
        """Parameter name → (transform, checkpoint names by source pattern, first target name)."""
        if self._plan is None:
            self._plan = plan(self._model, list(getattr(self._reader, "names", ())))
        return self._plan

    def _convert(self, name: str) -> None:
        transform, sources, first = self._targets()[name]
        if not hasattr(transform, "operations"):  # a renaming: one tensor, another name
            self._made[name] = self._reader.get(sources[""][0])
            return
        converter = deepcopy(transform)
        for pattern, originals in sources.items():
            for original in originals:
                converter.add_tensor(first, original, pattern, self._reader.get(original))
        model = self._model
        params = dict(model.named_parameters())
        for target, value in converter.convert(first, model=model, config=model.config).items():
            tensor = value[0] if isinstance(value, list) else value
            if target in params and tuple(tensor.shape) != tuple(params[target].shape):
                raise ArchitectureError(
                    f"transformers' conversion of {', '.join(o for v in sources.values() for o in v)} gives "
                    f"{target} of shape {tuple(tensor.shape)}, the model's is {tuple(params[target].shape)}"
                )
            self._made[target] = tensor


def plan(model: torch.nn.Module, names: list[str]) -> dict[str, tuple[object, dict[str, list[str]], str]]:
    """Which checkpoint tensors (``names``) make which of ``model``'s parameters, by transformers' rules."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

    try:
        mapping = get_model_conversion_mapping(model)
    except Exception:  # noqa: BLE001 — a family without rules: its names are its parameters'
        return {}
    renamings = [m for m in mapping if isinstance(m, WeightRenaming)]
    converters = [m for m in mapping if isinstance(m, WeightConverter)]
    by_pattern = {p: c for c in converters for p in c.source_patterns}
    params = dict.fromkeys(name for name, _ in model.named_parameters())
    params = {name: True for name in params}
    out: dict[str, tuple[object, dict[str, list[str]], str]] = {}
    for original in names:
        renamed, pattern = rename_source_key(original, renamings, converters, model.base_model_prefix, params)
        if pattern is None:
            if renamed != original and renamed in params:
                out[renamed] = (WeightRenaming(original, renamed), {"": [original]}, renamed)
            continue
        converter = by_pattern[pattern]
        first_target = converter.target_patterns[0]
        if first_target not in renamed:
            continue
        head, _, tail = renamed.partition(first_target)
        for target in converter.target_patterns:
            entry = out.setdefault(head + target + tail, (converter, {}, renamed))
            if entry[2] == renamed:
                entry[1].setdefault(pattern, [])
                if original not in entry[1][pattern]:
                    entry[1][pattern].append(original)
    return out
