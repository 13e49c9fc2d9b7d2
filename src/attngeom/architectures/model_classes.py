"""Model classes: the one transformers declares for a config class that no auto mapping names, and the
family prefix that the model's own class names share."""

from __future__ import annotations

import re

import torch

WORD = re.compile(r"[A-Z][a-z]*\d*|\d+")
"""A CamelCase word of a class name."""


def own_model_class(model_type: str) -> type | None:
    """A model class no auto mapping names, declared for this config class in its module (a sub-config's
    tower such as Step3p7's text model under its ``step3p5`` name, a vocoder): the base ``...Model`` first."""
    import importlib

    from transformers import CONFIG_MAPPING, PreTrainedModel

    config_class = CONFIG_MAPPING[model_type]
    module = importlib.import_module(config_class.__module__.rsplit(".", 1)[0])
    values = ((name, getattr(module, name)) for name in sorted(dir(module)))  # a lazy module: not vars()
    found = [
        value
        for name, value in values
        if isinstance(value, type)
        and issubclass(value, PreTrainedModel)
        and "PreTrained" not in name
        and getattr(value, "config_class", None) is config_class
    ]
    return next((c for c in found if c.__name__.endswith("Model")), found[0] if found else None)


def family_words(model: torch.nn.Module) -> int:
    """How many leading CamelCase words the model's own classes share (``KimiLinear`` of
    ``KimiLinearModel``): the family prefix, not part of what a module class says it is."""
    from transformers import PreTrainedModel

    names = [WORD.findall(type(m).__name__) for m in model.modules() if isinstance(m, PreTrainedModel)]
    names = [n[:-1] for n in names if len(n) > 1]  # without Model / ForCausalLM's last word
    if not names:
        return 0
    common = 0
    while all(len(n) > common and n[common] == names[0][common] for n in names):
        common += 1
    return common
