"""What transformers documents about a model type, for its labels: the tasks its auto mappings name for it,
whether its model embeds each modality apart (a dual encoder: ``get_text_features`` beside
``get_image_features``), and whether it reads text beside an image or a recording.

A discovered type's stacks are labelled by what their attention did in the forward pass (``observe``); the
model is labelled by its documented objective, by one rule for every family: a model whose documented tasks
generate no sequence (contrastive dual encoders, detectors, matchers, retrievers) is ``bidirectional``
whatever its towers' masks (CLIP's text tower is causal, as AIMv2's and VideoPrism's); a sequence-to-sequence
model (an encoder-decoder config with seq2seq task classes) is ``encoder-decoder``; otherwise the
observation stands. A model that reads text tokens beside a medium is ``multimodal``.
"""

from __future__ import annotations

import inspect
import re

import torch

GENERATIVE = (
    "CAUSAL_LM",
    "SEQ_TO_SEQ_CAUSAL_LM",
    "SPEECH_SEQ_2_SEQ",
    "IMAGE_TEXT_TO_TEXT",
    "MULTIMODAL_LM",
    "TEXT_TO_SPECTROGRAM",
    "TEXT_TO_WAVEFORM",
    "CAUSAL_IMAGE_MODELING",
    "TIME_SERIES_PREDICTION",
    "DECISION",
)
"""Task mappings (``MODEL_FOR_<task>_MAPPING_NAMES``) whose classes generate or predict a sequence."""
SEQ2SEQ = ("SEQ_TO_SEQ_CAUSAL_LM", "SPEECH_SEQ_2_SEQ", "TIME_SERIES_PREDICTION")
"""Task mappings whose encoder-decoder configs generate from an encoder's states (FSMT's, Informer's)."""
GENERATOR = re.compile(r"(ForCausalLM|ForConditionalGeneration|LMHeadModel)$")
"""Class names of a model that generates, where no auto mapping names the type (CLVP's speech decoder)."""
NOT_A_TASK = ("BACKBONE", "PRETRAINING", "TEXT_ENCODING")
"""Mappings that say how a model is used inside others (a backbone, a diffusion pipeline's text encoder)
or pre-trained, not what it is trained for."""
MEDIA_INPUTS = re.compile(r"^(pixel_values\w*|flattened_patches|input_features|input_values|audio\w*)$")
MEDIA_CONFIGS = re.compile(r"vision|visual|image|video|audio|speech|codec|vq")
"""Sub-config names of a medium's tower or codec (Kyutai's speech-to-text reads Mimi's audio codes)."""


def tasks(model_type: str) -> set[str]:
    """The tasks transformers' auto mappings name ``model_type`` for (``NOT_A_TASK`` left out)."""
    from transformers.models.auto import modeling_auto

    found = set()
    for name in dir(modeling_auto):
        if name.startswith("MODEL_FOR_") and name.endswith("_MAPPING_NAMES"):
            if model_type in getattr(modeling_auto, name):
                found.add(name.removeprefix("MODEL_FOR_").removesuffix("_MAPPING_NAMES"))
    return found - set(NOT_A_TASK)


def dual_encoder(model_type: str) -> bool:
    """Whether the type's base model embeds text and another modality apart (``get_text_features`` and
    another ``get_<medium>_features``): trained to compare the embeddings, generating nothing."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    name = MODEL_MAPPING_NAMES.get(model_type)
    name = name[0] if isinstance(name, (list, tuple)) else name
    cls = getattr(transformers, name, None) if name else None
    features = {n for n in dir(cls) if n.startswith("get_") and n.endswith("_features")} if cls else set()
    return "get_text_features" in features and len(features) > 1


def generator_class(model_type: str) -> bool:
    """Whether transformers defines a generating class (``GENERATOR``) for ``model_type``'s config."""
    import importlib

    from transformers import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[model_type]
    module = importlib.import_module(config_class.__module__.rsplit(".", 1)[0])
    for name in dir(module):
        value = getattr(module, name, None)
        if GENERATOR.search(name) and getattr(value, "config_class", None) is config_class:
            return True
    return False


def _not_generating(model_type: str, own: set[str]) -> bool:
    """Whether the type is documented for tasks that generate nothing: such tasks only, or a dual encoder."""
    return not own & set(GENERATIVE) and (bool(own) or dual_encoder(model_type))


def objective(model_type: str, observed: str, parent: str | None = None) -> str:
    """The model's objective: ``observed`` (from its attention), unless its documented tasks say otherwise
    (the module docstring); a type documenting no task of its own (CLIP's text tower alone) is
    ``bidirectional`` where its ``parent`` is documented for none that generates, unless it has a
    generating class of its own (CLVP's speech decoder)."""
    from transformers import CONFIG_MAPPING

    own = tasks(model_type)
    if not own and not dual_encoder(model_type):
        if parent is not None and _not_generating(parent, tasks(parent)) and not generator_class(model_type):
            return "bidirectional"
        return observed
    if _not_generating(model_type, own):
        return "bidirectional"
    try:
        encoder_decoder = bool(getattr(CONFIG_MAPPING[model_type](), "is_encoder_decoder", False))
    except Exception:  # noqa: BLE001 — a config whose defaults do not build: no documented layout
        encoder_decoder = False
    return "encoder-decoder" if encoder_decoder and own & set(SEQ2SEQ) else observed


def text_and_media(model: torch.nn.Module) -> bool:
    """Whether the model reads text tokens (``input_ids``) beside an image, a video or a recording: as an
    input of its forward, or through a tower or codec its config holds."""
    params = inspect.signature(model.forward).parameters
    if "input_ids" not in params:
        return False
    subs = getattr(type(model.config), "sub_configs", None) or {}
    return any(MEDIA_INPUTS.match(p) for p in params) or any(MEDIA_CONFIGS.search(s) for s in subs)


def parent_of(model_type: str, specs: bool = False) -> str | None:
    """The model_type whose config holds ``model_type`` as a sub-config: the longest other type its name
    starts with (``blt_patcher`` → ``blt``), confirmed by that config's ``sub_configs`` (``specs``: or by
    the model type its sub-config defaults name, an ``AutoConfig`` sub-config's)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    stem = re.split(r"[-_]", model_type)[0]
    for parent in sorted(
        (t for t in CONFIG_MAPPING_NAMES if t != model_type and t.startswith(stem)), key=len, reverse=True
    ):
        subs = list((getattr(CONFIG_MAPPING[parent], "sub_configs", None) or {}).values())
        subs += (
            list((getattr(CONFIG_MAPPING[parent], "sub_configs_defaults", None) or {}).values())
            if specs
            else []
        )
        if any(getattr(sub, "model_type", None) == model_type for sub in subs):
            return parent
    return None
