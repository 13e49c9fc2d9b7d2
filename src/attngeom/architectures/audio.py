"""Audio encoders: the wav2vec 2.0 lineage (MMS checkpoints are model_type wav2vec2) and the audio
spectrogram transformer (the ViT layout over spectrogram patches).

The convolutional relative position embedding is added to the input of the first layer, so it is part
of x, not of the form. WavLM adds a gated relative position bias to the scores: outside the form.
"""

from __future__ import annotations

from collections.abc import Iterator

from transformers import PretrainedConfig

from .base import Architecture, AttentionLayer, TensorReader, separate_layers
from .vision import vit_layers


def _wav2vec2_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    return separate_layers(
        config,
        reader,
        "encoder.layers.{i}.attention",
        "q_proj",
        "k_proj",
        stack="encoder",
        left_out=("scale",) + (("relative_position",) if config.model_type == "wavlm" else ()),
    )


WAV2VEC2 = Architecture(
    model_types=("wav2vec2", "hubert", "unispeech", "unispeech-sat", "data2vec-audio", "sew", "wavlm"),
    modality="audio",
    objective="bidirectional",
    layers=_wav2vec2_layers,
    n_layers=lambda c: c.num_hidden_layers,
    notes="MMS is wav2vec2",
    stacks=("encoder",),
)

AST = Architecture(
    model_types=("audio-spectrogram-transformer",),
    modality="audio",
    objective="bidirectional",
    layers=vit_layers,
    n_layers=lambda c: c.num_hidden_layers,
    notes="ViT over spectrogram patches",
    stacks=("encoder",),
)

ARCHITECTURES: list[Architecture] = [WAV2VEC2, AST]
