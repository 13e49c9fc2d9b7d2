"""Conformance of the speech encoders (wav2vec 2.0 lineage) through the on-disk path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conformance import (
    assert_conforms,
    build,
    capture_qk,
    capture_torch_multihead,
    layers_from_disk,
    tiny_config,
)

import attngeom

SIZES = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=32,
    conv_dim=(8, 8),
    conv_stride=(4, 4),
    conv_kernel=(8, 4),
    num_conv_pos_embeddings=4,
    num_conv_pos_embedding_groups=2,
    vocab_size=20,
)
MODEL_TYPES = ["wav2vec2", "hubert", "unispeech", "unispeech-sat", "data2vec-audio", "sew", "wavlm"]


def _inputs() -> dict:
    return {
        "input_values": torch.randn(2, 200, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    }


def _wavlm_projection(query, key, value, in_proj_weight, in_proj_bias, kwargs):
    """WavLM calls torch's multi_head_attention_forward with its q/k/v weights: the projections torch
    itself computes there (``F._in_projection``), before the gated relative position bias."""
    b_q, b_k, b_v = in_proj_bias.chunk(3)
    weights = (kwargs["q_proj_weight"], kwargs["k_proj_weight"], kwargs["v_proj_weight"])
    q, k, _ = F._in_projection(query, key, value, *weights, b_q, b_k, b_v)
    return q, k


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_forward_pass_conformance_from_disk(model_type, tmp_path):
    extra = {"squeeze_factor": 2} if model_type == "sew" else {}
    model = build(tiny_config(model_type, **SIZES, **extra))
    layers = layers_from_disk(model, tmp_path)
    assert len(layers) == 2
    if model_type == "wavlm":
        captures = capture_torch_multihead(model, _inputs(), _wavlm_projection)
        assert all("relative_position" in layer.left_out for layer in layers)
    else:
        captures = capture_qk(model, _inputs())
    assert_conforms(captures, layers)
    frame = attngeom.score(tmp_path, progress=False)
    assert len(frame) == 2 * (4 + 1) and set(frame["modality"]) == {"audio"}
    assert frame["kv_head"].dropna().tolist() == [0, 1, 2, 3] * 2


def test_audio_spectrogram_transformer_conforms(tmp_path):
    config = tiny_config(
        "audio-spectrogram-transformer",
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=32,
        num_mel_bins=16,
        max_length=32,
        patch_size=8,
    )
    model = build(config)
    layers = layers_from_disk(model, tmp_path)
    features = torch.randn(2, 32, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert_conforms(capture_qk(model, {"input_values": features}), layers)
    on_disk, in_memory = attngeom.score(tmp_path, progress=False), attngeom.score(model, progress=False)
    assert set(on_disk["modality"]) == {"audio"} and len(on_disk) == len(in_memory) == 2 * (4 + 1)
