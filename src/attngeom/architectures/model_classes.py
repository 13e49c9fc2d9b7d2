"""The model class transformers declares for a config class that no auto mapping names."""

from __future__ import annotations


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
