"""What the conformance run observed in a type's forward pass, as ``support.json`` keeps it.

Which kinds of attention module compute their keys from another input than their queries (a cross form,
whatever the module is called), and the type's objective (causal masks seen or not). A kind is a
module's path template (``encoder.layers.{}.blocks.{}.attention``); where one template's modules differ in
what their keys read, the kind adds the names of the module's parametrised children
(``... [key,layer_norm,proj,query,sr,value]``: PVT's spatial reduction ``sr``), which carries the
observation from the tiny model to a checkpoint of any depth. A leaf module.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def signature(module: torch.nn.Module) -> str:
    """The names of ``module``'s children that hold parameters, sorted."""
    return ",".join(sorted(n for n, c in module.named_children() if next(c.parameters(), None) is not None))


def kind(template: str, module: torch.nn.Module) -> str:
    """The kind of the attention module at a path of ``template`` that tells its template's modules apart."""
    return f"{template} [{signature(module)}]"


@dataclass(frozen=True)
class Observed:
    """The kinds whose keys read another input (``cross``), the kinds of a template seen both ways whose
    keys read the queries' input (``self_kinds``), the objective, and the class built; empty before the
    run observed."""

    cross: frozenset[str] = frozenset()
    self_kinds: frozenset[str] = frozenset()
    objective: str = ""
    model_class: str = ""
    """The checkpoint class built where the base model has no attention (``...ForTextRecognition``)."""

    @classmethod
    def of(cls, entry: dict) -> Observed:
        """What a ``support.json`` entry records."""
        return cls(
            frozenset(entry.get("cross", ())),
            frozenset(entry.get("self_kinds", ())),
            entry.get("objective", ""),
            entry.get("model_class", ""),
        )

    def is_cross(self, template: str, module: torch.nn.Module) -> bool:
        """Whether the module at a path of ``template`` is a cross form. A kind of a template seen both ways
        that the run did not see is one too: no symmetry is claimed for keys not seen reading the queries'
        input."""
        this = kind(template, module)
        if this in self.cross or template in self.cross:
            return True
        if this in self.self_kinds:
            return False
        return any(k.startswith(f"{template} [") for k in self.cross | self.self_kinds)

    def entry(self) -> dict:
        """The fields of a ``support.json`` entry besides the objective (each only where it is set)."""
        fields = {
            "cross": sorted(self.cross),
            "self_kinds": sorted(self.self_kinds),
            "model_class": self.model_class,
        }
        return {name: value for name, value in fields.items() if value}
