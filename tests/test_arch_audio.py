"""Conformance of the speech encoders (wav2vec 2.0 lineage) through the on-disk path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from conformance import (
    assert_conforms,
    build,
    capture_qk,
    capture_torch_multihead,
    layers_from_disk,
    removed_after,
    tiny_config,
)

import attngeom
from attngeom.architectures import architecture_for

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


CONFORMER_SIZES = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=32,
    conv_depthwise_kernel_size=3,
    vocab_size=20,
)
W2V2_CONV = {key: SIZES[key] for key in ("conv_dim", "conv_stride", "conv_kernel")}
W2V2_CONV.update(num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2)


def _conformer(model_type: str, positions: str | None, **extra):
    front = W2V2_CONV if model_type == "wav2vec2-conformer" else {"feature_projection_input_dim": 16}
    return tiny_config(model_type, **CONFORMER_SIZES, **front, position_embeddings_type=positions, **extra)


@contextmanager
def rotary_inputs_neutralised(model) -> Iterator[None]:
    """Conformer rotary rotates the layer input before the q/k projections: (cos, sin) = (1, 0) makes it
    the identity, so the captured q·k is the content form alone."""

    def pre_hook(module, args, kwargs):
        if module.position_embeddings_type != "rotary":
            return None
        cos, sin = kwargs["relative_position_embeddings"]
        neutral = torch.stack([torch.ones_like(cos), torch.zeros_like(sin)])
        return args, {**kwargs, "relative_position_embeddings": neutral}

    modules = [m for m in model.modules() if type(m).__name__.endswith("SelfAttention")]
    with removed_after([m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]):
        yield


def _conformer_inputs(model_type: str) -> dict:
    if model_type == "wav2vec2-conformer":
        return _inputs()
    g = torch.Generator().manual_seed(3)
    return {"input_features": torch.randn(2, 12, 16, generator=g, dtype=torch.float64)}


@pytest.mark.parametrize(
    ("model_type", "positions", "left_out"),
    [
        ("wav2vec2-conformer", "relative", "relative_position"),
        ("wav2vec2-conformer", "rotary", "rotary"),
        ("wav2vec2-conformer", None, None),
        ("wav2vec2-bert", "relative_key", "relative_position"),
        ("wav2vec2-bert", "relative", "relative_position"),
    ],
)
def test_conformer_self_attention_conforms(model_type, positions, left_out, tmp_path):
    """The content term q·k: Transformer-XL's content bias u is part of the query bias (the captured
    query already carries it); the position terms go to the scores separately and are left out.
    Rotary (applied to the layer input) is made the identity for the check."""
    model = build(_conformer(model_type, positions))
    layers = layers_from_disk(model, tmp_path)
    assert [(layer.stack, layer.layer) for layer in layers] == [("encoder", 0), ("encoder", 1)]
    assert all(left_out is None or left_out in layer.left_out for layer in layers)
    with rotary_inputs_neutralised(model):
        captures = capture_qk(model, _conformer_inputs(model_type))
    assert_conforms(captures, layers)
    frame = attngeom.score(tmp_path, progress=False)
    assert set(frame["modality"]) == {"audio"} and len(frame) == 2 * (4 + 1)


def test_w2v_bert_adapter_layers_are_their_own_stack(tmp_path):
    config = _conformer(
        "wav2vec2-bert",
        "relative_key",
        add_adapter=True,
        num_adapter_layers=2,
        output_hidden_size=24,
        adapter_kernel_size=3,
        adapter_stride=2,
    )
    model = build(config)
    layers = layers_from_disk(model, tmp_path)
    assert [(layer.stack, layer.w_q.shape[0]) for layer in layers] == [
        ("encoder", 32),
        ("encoder", 32),
        ("adapter", 24),
        ("adapter", 24),
    ]
    assert_conforms(capture_qk(model, _conformer_inputs("wav2vec2-bert")), layers)
    assert architecture_for(config).n_layers(config) == len(layers)
