"""Conformance of the hierarchical vision encoders added beside Swin: SegFormer and MobileViT."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conformance import (
    assert_conforms,
    build,
    capture_projections,
    capture_qk_pairs,
    layers_from_disk,
    tiny_config,
)

import attngeom
from attngeom.architectures import architecture_for

SEGFORMER_SIZES = dict(
    num_encoder_blocks=3,
    hidden_sizes=[8, 16, 24],
    depths=[1, 2, 1],
    num_attention_heads=[1, 2, 3],
    sr_ratios=[4, 2, 1],
    patch_sizes=[7, 3, 3],
    strides=[4, 2, 2],
    mlp_ratios=[2, 2, 2],
    decoder_hidden_size=16,
)
MOBILEVIT_SIZES = dict(
    hidden_sizes=[16, 24, 32],
    neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 40],
    num_attention_heads=2,
    image_size=32,
    patch_size=2,
)


def _pixels() -> dict:
    g = torch.Generator().manual_seed(3)
    return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float64)}


def _segformer_inputs(module, arguments):
    """Queries read x; keys read the module's own reduced sequence LayerNorm(conv(x)) where it has one."""
    x = arguments["hidden_states"]
    if module.sequence_reduction_ratio == 1:
        return x, x
    return x, module.sequence_reduction(x, arguments["height"], arguments["width"])


@pytest.fixture(scope="module")
def segformer():
    return build(tiny_config("segformer", **SEGFORMER_SIZES))


def test_segformer_conforms_with_reduced_keys_as_cross_forms(segformer, tmp_path):
    layers = layers_from_disk(segformer, tmp_path)
    assert [(layer.stack, layer.layer, layer.cross) for layer in layers] == [
        ("encoder_cross", 0, True),  # keys read the reduced sequence, another input than the queries
        ("encoder_cross", 1, True),
        ("encoder_cross", 2, True),
        ("encoder", 3, False),
    ]
    assert [layer.w_q.shape[0] for layer in layers] == [8, 16, 16, 24]
    assert_conforms(capture_qk_pairs(segformer, _pixels(), _segformer_inputs), layers)
    config = segformer.config
    assert architecture_for(config).n_layers(config) == len(layers)


def test_segformer_scores(segformer, tmp_path):
    segformer.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(segformer, progress=False)
    np.testing.assert_allclose(on_disk["norm"].to_numpy(float), in_memory["norm"].to_numpy(float))
    reduced = on_disk["stack"] == "encoder_cross"
    assert reduced.any() and on_disk[reduced]["symmetry"].isna().all()
    assert on_disk[~reduced]["symmetry"].notna().all() and on_disk[reduced]["directionality"].notna().all()


def test_mobilevit_conforms_across_its_three_stages(tmp_path):
    from transformers.models.mobilevit.modeling_mobilevit import MobileViTSelfAttention

    model = build(tiny_config("mobilevit", **MOBILEVIT_SIZES))
    layers = layers_from_disk(model, tmp_path)
    assert [layer.w_q.shape[0] for layer in layers] == [16] * 2 + [24] * 4 + [32] * 3
    assert [layer.layer for layer in layers] == list(range(9))
    assert_conforms(capture_projections(model, _pixels(), MobileViTSelfAttention, "query", "key"), layers)
    frame = attngeom.score(tmp_path, progress=False)
    assert set(frame["stack"]) == {"encoder"} and set(frame["head_dim"]) == {8, 12, 16}
