"""Model classes: the one an auto mapping names for a ``model_type``, else the one transformers declares
for its config class; and the family prefix that the model's own class names share."""

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


def builds_a_part(model_type: str, cls: type) -> bool:
    """Whether ``cls`` takes one of ``model_type``'s sub-configs, not its config (MusicGen-Melody's base
    model is its decoder: built from the whole config, it reads entries only the decoder's has)."""
    from transformers import CONFIG_MAPPING

    subs = (getattr(CONFIG_MAPPING[model_type], "sub_configs", None) or {}).values()
    return getattr(cls, "config_class", None) in set(subs)


def mapped_class(model_type: str) -> type | None:
    """The class an auto mapping names for ``model_type``: its base model (``AutoModel``), else the first
    task class (ColPali's retrieval model, ...); a base model built from a sub-config only is passed over
    for a task class built from the whole config (MusicGen-Melody's)."""
    import transformers
    from transformers.models.auto import modeling_auto

    base = modeling_auto.MODEL_MAPPING_NAMES.get(model_type)
    if base is not None and not builds_a_part(model_type, cls := getattr(transformers, base, None)):
        config_class = transformers.CONFIG_MAPPING[model_type]
        if cls is None or config_class in transformers.AutoModel._model_mapping:  # as from_config asks
            return transformers.AutoModel
        return cls  # a config class AutoModel does not resolve (Evolla's, registered under two names)
    for name in sorted(vars(modeling_auto)):
        mapping = getattr(modeling_auto, name)
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and model_type in mapping:
            names = mapping[model_type]
            cls = getattr(transformers, names[0] if isinstance(names, (list, tuple)) else names)
            if base is None or not builds_a_part(model_type, cls):
                return cls
    return None
