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


def config_base_of(model_type: str) -> str | None:
    """The model type whose config ``model_type``'s extends in transformers' modular source, where
    transformers defines no model for ``model_type`` itself (LayoutXLM's config is LayoutLMv2's, and its
    checkpoints load into LayoutLMv2's model)."""
    import importlib.util
    import re
    from pathlib import Path

    from transformers import CONFIG_MAPPING
    from transformers.models.auto import modeling_auto

    mappings = [
        getattr(modeling_auto, n) for n in dir(modeling_auto) if re.match(r"MODEL_\w*MAPPING_NAMES$", n)
    ]
    if any(model_type in m for m in mappings) or own_model_class(model_type) is not None:
        return None
    config = CONFIG_MAPPING[model_type]
    package = config.__module__.rsplit(".", 1)[0]
    spec = importlib.util.find_spec(f"{package}.modular_{package.rsplit('.', 1)[-1]}")
    if spec is None or spec.origin is None:
        return None
    found = re.search(rf"^class {config.__name__}\((\w+)\)", Path(spec.origin).read_text(), re.MULTILINE)
    names = {CONFIG_MAPPING[t].__name__: t for t in modeling_auto.MODEL_MAPPING_NAMES if t in CONFIG_MAPPING}
    return names.get(found.group(1)) if found else None


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
    several = isinstance(base, (list, tuple))  # Funnel's (FunnelModel, FunnelBaseModel): the first
    base = base[0] if several else base
    if base is not None and not builds_a_part(model_type, cls := getattr(transformers, base, None)):
        config_class = transformers.CONFIG_MAPPING[model_type]
        if cls is None or (config_class in transformers.AutoModel._model_mapping and not several):
            return transformers.AutoModel  # as from_config asks
        # a config class AutoModel does not resolve (Evolla's, registered under two names), or resolves
        # only by the config's architectures (several base classes)
        return cls
    for name in sorted(vars(modeling_auto)):
        mapping = getattr(modeling_auto, name)
        if name.startswith("MODEL_") and name.endswith("_MAPPING_NAMES") and model_type in mapping:
            names = mapping[model_type]
            cls = getattr(transformers, names[0] if isinstance(names, (list, tuple)) else names)
            if base is None or not builds_a_part(model_type, cls):
                return cls
    return None


PATCHES = ("grid_thw", "image_grid_thw")
"""Arguments beside ``hidden_states`` that make them an image's flattened patches (a vision tower's)."""


def main_input(model: torch.nn.Module) -> str:
    """The input the model's forward is mainly given: its ``main_input_name`` (a list's first: OneFormer's
    [pixel_values, task_inputs]) where its forward takes it, else its media (``pixel_values`` for patches
    named ``hidden_states``), else its first argument."""
    import inspect

    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    main = main[0] if isinstance(main, (list, tuple)) else main
    if main in params:
        return main
    media = ("pixel_values", "pixel_values_videos", "flattened_patches", "input_features", "input_values")
    found = next((name for name in media if name in params), None)
    if found is None and "hidden_states" in params and any(name in params for name in PATCHES):
        found = "pixel_values"
    return found or next(iter(params), main)


def checkpoint_classes(model_type: str) -> list[type]:
    """The task classes (``...For...``) that auto mappings name for ``model_type``: the classes its
    checkpoints are saved from, in the mappings' order."""
    import transformers
    from transformers.models.auto import modeling_auto

    names: list[str] = []
    for mapping in sorted(vars(modeling_auto)):
        if mapping.startswith("MODEL_FOR_") and mapping.endswith("_MAPPING_NAMES"):
            value = getattr(modeling_auto, mapping).get(model_type)
            names += [value] if isinstance(value, str) else list(value or ())
    found = (getattr(transformers, n, None) for n in dict.fromkeys(names))
    return [c for c in found if isinstance(c, type)]


def class_of_type(model_type: str, name: object) -> type | None:
    """transformers' class ``name`` where it builds ``model_type`` (its ``config_class`` is that type's)."""
    import transformers

    cls = getattr(transformers, name, None) if isinstance(name, str) and name.isidentifier() else None
    config_class = getattr(cls, "config_class", None) if isinstance(cls, type) else None
    return cls if getattr(config_class, "model_type", None) == model_type else None


def declared_class(config) -> str:
    """The checkpoint class ``config.architectures`` names where transformers defines it for this config's
    type (a T5 or Switch encoder alone, a BART decoder alone, ViT-MAE with its pre-training decoder, BLIP's
    captioner), so the model discovery reads holds the stacks the checkpoint holds; else "" (the base model)."""
    names = getattr(config, "architectures", None) or ()
    return next((name for name in names if class_of_type(config.model_type, name)), "")
