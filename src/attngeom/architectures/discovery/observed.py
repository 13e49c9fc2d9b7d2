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


def lone_causal(entry: dict) -> frozenset[str]:
    """The template of an entry's one stack, where it is among the stacks it records as seen causal."""
    templates, stacks = entry.get("templates", ()), entry.get("stacks", ())
    lone = len(templates) == 1 and len(stacks) == 1 and stacks[0] in entry.get("causal_stacks", ())
    return frozenset(templates) if lone else frozenset()


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
    unscaled: frozenset[str] = frozenset()
    """Templates whose attention got the projections' q and k with no scale (T5's): no ``scale`` term."""
    score_bias: frozenset[str] = frozenset()
    """Templates whose attention adds a score bias over the token pair: ``relative_position``."""
    softcap: frozenset[str] = frozenset()
    """Templates whose attention soft-caps the scores: ``attn_logit_softcapping``."""
    templates: frozenset[str] = frozenset()
    """Every template whose modules the run validated (empty: not recorded, nothing is checked)."""
    causal: frozenset[str] = frozenset()
    """The template of a type's lone stack where the run saw its attention causal: its stack is a
    ``decoder`` whatever the type's documented objective (``stacks.place``)."""

    @classmethod
    def of(cls, entry: dict) -> Observed:
        """What a ``support.json`` entry records."""
        return cls(
            frozenset(entry.get("cross", ())),
            frozenset(entry.get("self_kinds", ())),
            entry.get("objective", ""),
            entry.get("model_class", ""),
            *(frozenset(entry.get(n, ())) for n in ("unscaled", "score_bias", "softcap", "templates")),
            lone_causal(entry),
        )

    def terms(self, template: str, scale: tuple[str, ...], module: torch.nn.Module) -> tuple[str, ...]:
        """What the attention ``module`` at a path of ``template`` leaves out of the form: ``scale`` (the
        terms its config names, ``scale`` among them) less the scale where the tiny model's had none and
        this one's own ``scaling`` (a config value: Granite's multiplier) is 1 too, a score bias where
        one was seen, a soft cap where one was and this one's own cap (``attn_logit_softcapping``) is set."""
        template = self.as_seen(template)
        scaling = getattr(module, "scaling", 1.0)
        unscaled = template in self.unscaled and not (isinstance(scaling, float | int) and scaling != 1)
        kept = tuple(t for t in scale if t != "scale" or not unscaled)
        bias = ("relative_position",) if template in self.score_bias else ()
        capped = template in self.softcap and getattr(module, "attn_logit_softcapping", True) is not None
        return kept + bias + (("attn_logit_softcapping",) if capped else ())

    def as_seen(self, template: str) -> str:
        """``template`` as the run saw it: itself, else the longest template the run observed that it
        ends with (a checkpoint class puts the base model under a prefix: ``model.``, ``vit.``)."""
        seen = {k.split(" [")[0] for k in self.cross | self.self_kinds}
        seen |= self.unscaled | self.score_bias | self.softcap | self.templates
        if template in seen:
            return template
        return max((t for t in seen if template.endswith(f".{t}")), key=len, default=template)

    def validated(self, template: str) -> bool:
        """Whether the run validated modules of ``template`` (a config can add others: GPT-2's
        ``add_cross_attention``, whose fused projection yields k and v only)."""
        return not self.templates or self.as_seen(template) in self.templates

    def is_cross(self, template: str, module: torch.nn.Module) -> bool:
        """Whether the module at a path of ``template`` is a cross form. A kind of a template seen both ways
        that the run did not see is one too: no symmetry is claimed for keys not seen reading the queries'
        input."""
        template = self.as_seen(template)
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
            "unscaled": sorted(self.unscaled),
            "score_bias": sorted(self.score_bias),
            "softcap": sorted(self.softcap),
            "templates": sorted(self.templates),
        }
        return {name: value for name, value in fields.items() if value}
