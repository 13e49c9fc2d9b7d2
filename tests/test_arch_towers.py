"""Conformance of the two-tower models added beside CLIP (SigLIP2, OWL-ViT, OWLv2) and of single towers
(text, vision, Pixtral's encoder, BLIP-2's Q-Former) saved on their own."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from conformance import (
    TEXT_SIZES,
    VISION_SIZES,
    assert_conforms,
    build,
    capture_qk_pairs,
    layers_from_disk,
    rotary_neutralised,
    scored,
    tiny_config,
)
from transformers import AutoModel

import attngeom
from attngeom.architectures import architecture_for

SIGLIP2_PATCHES = 16


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(3)


def _text_and_pixels(config) -> dict:
    g = _generator()
    return {
        "input_ids": torch.randint(0, 100, (2, 7), generator=g),
        "pixel_values": torch.randn(2, 3, 32, 32, generator=g, dtype=torch.float64),
    }


def _siglip2_inputs(config) -> dict:
    """NaFlex inputs: flattened 8 × 8 patches of a 4 × 4 grid, all valid."""
    g = _generator()
    n = SIGLIP2_PATCHES
    return {
        "input_ids": torch.randint(0, 100, (2, 7), generator=g),
        "pixel_values": torch.randn(2, n, 3 * 8 * 8, generator=g, dtype=torch.float64),
        "pixel_attention_mask": torch.ones(2, n, dtype=torch.long),
        "spatial_shapes": torch.tensor([[4, 4], [4, 4]]),
    }


# model_type → (config, inputs)
TWO_TOWERS = {
    "owlvit": (
        lambda: tiny_config("owlvit", text_config=TEXT_SIZES, vision_config=VISION_SIZES),
        _text_and_pixels,
    ),
    "owlv2": (
        lambda: tiny_config("owlv2", text_config=TEXT_SIZES, vision_config=VISION_SIZES),
        _text_and_pixels,
    ),
    "siglip2": (
        lambda: tiny_config(
            "siglip2",
            text_config=TEXT_SIZES,
            vision_config={
                **VISION_SIZES,
                "hidden_size": 32,
                "num_attention_heads": 2,
                "num_patches": SIGLIP2_PATCHES,
            },
        ),
        _siglip2_inputs,
    ),
}


@pytest.fixture(scope="module")
def two_towers() -> dict:
    cache: dict = {}

    def get(model_type: str):
        if model_type not in cache:
            make_config, inputs = TWO_TOWERS[model_type]
            cache[model_type] = (build(make_config()), inputs)
        return cache[model_type]

    return get


def _per_tower(model, inputs) -> list:
    """One capture run per tower (text first, as the map yields them); only the towers' attention modules."""
    captures = []
    for tower in (model.text_model, model.vision_model):
        own = {id(m) for m in tower.modules() if hasattr(m, "q_proj")}
        captures += capture_qk_pairs(model, inputs, module_filter=lambda m, own=own: id(m) in own)
    return captures


TOWERS = ("text_model_encoder", "vision_model_encoder")
"""Discovery's stack names for a two-tower model: the words of each tower's module paths."""


@pytest.mark.parametrize("model_type", sorted(TWO_TOWERS))
def test_two_tower_conformance_from_disk(model_type, two_towers, tmp_path):
    model, inputs = two_towers(model_type)
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in scored(layers)] == [TOWERS[0]] * 2 + [TOWERS[1]] * 2
    assert_conforms(_per_tower(model, inputs(model.config)), scored(layers))
    assert architecture_for(model.config).n_layers(model.config) == len(scored(layers))


def test_owl_towers_score_end_to_end(two_towers, tmp_path):
    model, _ = two_towers("owlv2")
    model.save_pretrained(tmp_path / "owlv2")
    on_disk = attngeom.score(tmp_path / "owlv2", progress=False)
    in_memory = attngeom.score(model, progress=False)
    np.testing.assert_allclose(on_disk["symmetry"].to_numpy(float), in_memory["symmetry"].to_numpy(float))
    assert dict(on_disk.groupby("stack")["modality"].first()) == dict(
        zip(TOWERS, ("language", "vision"), strict=True)
    )


@pytest.mark.parametrize(
    ("model_type", "model_class", "sizes", "stack", "modality"),
    [
        ("siglip2_text_model", "Siglip2TextModel", TEXT_SIZES, "encoder", "language"),  # by objective
        ("owlvit_vision_model", "OwlViTVisionModel", VISION_SIZES, "encoder", "vision"),
        ("idefics3_vision", "Idefics3VisionTransformer", VISION_SIZES, "encoder", "vision"),
        ("blip_vision_model", "BlipVisionModel", VISION_SIZES, "vision", "vision"),
    ],
)
def test_single_tower_checkpoints(model_type, model_class, sizes, stack, modality, tmp_path):
    model_class = getattr(transformers, model_class)
    model = build(tiny_config(model_type, **sizes), SimpleNamespace(from_config=model_class))
    model.save_pretrained(tmp_path)
    frame = attngeom.score(tmp_path, progress=False)
    assert set(frame["stack"]) == {stack} and set(frame["modality"]) == {modality}
    heads = sizes["num_attention_heads"]
    assert len(frame) == 2 * (heads + 1)
    assert set(frame["hidden_size"]) == {sizes["hidden_size"]}


def test_pixtral_vision_encoder_conforms(tmp_path):
    config = tiny_config(
        "pixtral", **{**VISION_SIZES, "hidden_size": 32, "num_attention_heads": 4}, head_dim=8
    )
    model = build(config)
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.b_q is None and "rotary" in layer.left_out for layer in layers)
    inputs = {
        "pixel_values": torch.randn(1, 3, 32, 32, generator=_generator(), dtype=torch.float64),
        "image_sizes": torch.tensor([[32, 32]]),
    }
    with rotary_neutralised(model):
        assert_conforms(capture_qk_pairs(model, inputs, lambda m, a: (a["hidden_states"],) * 2), layers)


def test_qformer_on_its_own_conforms(tmp_path):
    """BLIP-2's Q-Former: the queries' self-attention, and every second layer their cross-attention
    to image features of another width."""
    config = tiny_config("blip_2_qformer", **TEXT_SIZES, encoder_hidden_size=24, cross_attention_frequency=2)
    model = build(config, AutoModel)
    layers = layers_from_disk(model, tmp_path)
    assert [(layer.stack, layer.layer) for layer in layers] == [
        ("qformer", 0),
        ("qformer", 1),
        ("qformer_cross", 0),
    ]
    assert layers[-1].cross and layers[-1].w_k.shape[0] == 24
    g = _generator()
    inputs = {
        "query_embeds": torch.randn(2, 4, 32, generator=g, dtype=torch.float64),
        "encoder_hidden_states": torch.randn(2, 9, 24, generator=g, dtype=torch.float64),
    }
    captures = capture_qk_pairs(model, inputs, module_filter=lambda m: hasattr(m, "query"))
    assert_conforms(captures, [layers[0], layers[2], layers[1]])  # layer 0: self, cross; layer 1: self
    frame = attngeom.score(tmp_path, progress=False)
    assert frame[frame["stack"] == "qformer_cross"]["symmetry"].isna().all()
    assert set(frame["modality"]) == {"multimodal"}
