"""Gemma 3 and Llama 4: a text decoder and a vision tower in one checkpoint, each tower its own stack.

Each tower runs its own forward pass inside the composite model; its captured q·k must match the layers
read back from the composite checkpoint on disk (the text decoders up to their q/k-norm scalars where
they normalise q and k). The text-only model types (``gemma3_text``, ``llama4_text``) are checked too.
"""

import pytest
import torch
from conformance import (
    assert_conforms,
    assert_conforms_up_to_scale,
    build,
    capture_projections,
    capture_qk,
    layers_from_disk,
    randomize,
    tiny_config,
    token_inputs,
)
from safetensors.torch import load_file, save_file
from transformers import Gemma3ForConditionalGeneration, Llama4ForConditionalGeneration, PretrainedConfig
from transformers.models.llama4.modeling_llama4 import Llama4VisionAttention

import attngeom
from attngeom.architectures.base import objective_in
from attngeom.architectures.tables.normalised_decoders import QK_L2NORM, QK_NORM_PER_HEAD

TEXT = {
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "num_hidden_layers": 2,
    "intermediate_size": 64,
    "vocab_size": 100,
    "pad_token_id": 0,
}
VISION = {"hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2, "intermediate_size": 64}
LLAMA4_TEXT = {**TEXT, "intermediate_size_mlp": 64, "num_local_experts": 2, "no_rope_layers": [1, 0]}
LLAMA4_VISION = {
    **VISION,
    "intermediate_size": 128,  # the pixel-shuffle adapter reads 4 · hidden_size
    "image_size": 16,
    "patch_size": 4,
    "vision_output_dim": 32,
    "projector_input_dim": 32,
    "projector_output_dim": 32,
}


def gemma3() -> torch.nn.Module:
    config = tiny_config(
        "gemma3",
        text_config={**TEXT, "query_pre_attn_scalar": 20},
        # Gemma 3's SigLIP tower has no attention-pooling head (vision_use_head: false in its checkpoints).
        vision_config={**VISION, "image_size": 16, "patch_size": 4, "vision_use_head": False},
        mm_tokens_per_image=4,
    )
    return randomize(Gemma3ForConditionalGeneration(config))


def llama4() -> torch.nn.Module:
    config = tiny_config("llama4", text_config=LLAMA4_TEXT, vision_config=LLAMA4_VISION)
    model = randomize(Llama4ForConditionalGeneration(config))
    model.set_experts_implementation("eager")
    return model


def pixels(batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)


def _by_stack(layers, stack: str):
    return [layer for layer in layers if layer.stack == stack]


GEMMA3_STACKS = ["vision_tower_encoder", "language_model"]
"""Discovery's stack names for Gemma 3: the words of each tower's module paths."""


def test_gemma3_vision_tower_and_text_decoder_conform(tmp_path):
    model = gemma3()
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == [GEMMA3_STACKS[0]] * 2 + [GEMMA3_STACKS[1]] * 2
    vision = model.model.vision_tower
    assert_conforms(capture_qk(vision, {"pixel_values": pixels()}), _by_stack(layers, GEMMA3_STACKS[0]))
    text = model.model.language_model
    decoder = _by_stack(layers, GEMMA3_STACKS[1])
    assert all(layer.form == QK_NORM_PER_HEAD for layer in decoder)
    assert_conforms_up_to_scale(
        capture_qk(text, token_inputs(text.config)), decoder, shared_across_heads=False
    )


def test_gemma3_hub_layout_scores_like_the_saved_one(tmp_path):
    """Hub checkpoints nest the SigLIP tower as ``vision_tower.vision_model.encoder``; both spellings read."""
    model = gemma3()
    model.save_pretrained(tmp_path / "saved")
    saved = attngeom.score(tmp_path / "saved", progress=False)
    hub = tmp_path / "hub"
    model.save_pretrained(hub)
    tensors = load_file(hub / "model.safetensors")
    renamed = {
        k.replace("vision_tower.encoder.", "vision_tower.vision_model.encoder."): v
        for k, v in tensors.items()
    }
    assert renamed.keys() != tensors.keys()
    save_file(renamed, hub / "model.safetensors", metadata={"format": "pt"})
    in_memory = attngeom.score(model, progress=False)
    for frame in (attngeom.score(hub, progress=False), in_memory):
        assert list(frame["stack"]) == list(saved["stack"])
        torch.testing.assert_close(
            torch.tensor(frame["symmetry"].to_numpy()), torch.tensor(saved["symmetry"].to_numpy())
        )
    assert set(saved["modality"]) == {"vision", "language"}
    assert set(saved[saved["stack"] == GEMMA3_STACKS[0]]["modality"]) == {"vision"}


def test_llama4_vision_encoder_and_text_decoder_conform(tmp_path):
    model = llama4()
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["vision"] * 2 + ["decoder"] * 2
    vision = model.vision_model
    captures = capture_projections(
        vision, {"pixel_values": pixels()}, Llama4VisionAttention, "q_proj", "k_proj"
    )
    assert_conforms(captures, _by_stack(layers, "vision"))
    text = model.language_model.model
    rope, nope = _by_stack(layers, "decoder")
    assert rope.form == QK_L2NORM and nope.form == "standard"
    assert rope.left_out == ("rotary", "scale", "chunked_attention")
    assert nope.left_out == ("scale", "attn_temperature_tuning")
    first, second = capture_qk(text, token_inputs(text.config))
    assert_conforms_up_to_scale([first], [rope], shared_across_heads=False)
    assert_conforms([second], [nope])
    with pytest.raises(AssertionError):  # the L2 norm is real: q·k of the rotary layer is not the raw form
        assert_conforms([first], [rope])


def test_llama4_text_only_checkpoint(tmp_path):
    model = build(tiny_config("llama4_text", **LLAMA4_TEXT))
    model.set_experts_implementation("eager")
    layers = layers_from_disk(model, tmp_path)
    assert [layer.form for layer in layers] == [QK_L2NORM, "standard"]
    captures = capture_qk(model, token_inputs(model.config, zero_positions=False))
    assert_conforms([captures[1]], [layers[1]])  # NoPE: exact at real positions


@pytest.mark.parametrize(
    ("setting", "objective"),
    [
        (True, "bidirectional"),
        ("all", "bidirectional"),
        ("vision", "autoregressive"),
        (None, "autoregressive"),
    ],
)
def test_only_a_config_that_lifts_the_text_s_causal_mask_makes_a_decoder_bidirectional(setting, objective):
    """EmbeddingGemma's True and Gemma 4's "all" lift it; Gemma 4's "vision" lifts it within images only."""
    assert objective_in("autoregressive", PretrainedConfig(use_bidirectional_attention=setting)) == objective


def test_embedding_gemma_is_a_bidirectional_encoder(tmp_path):
    model = build(tiny_config("gemma3_text", **TEXT, use_bidirectional_attention=True))
    layers = layers_from_disk(model, tmp_path)
    assert {layer.stack for layer in layers} == {"encoder"}
    assert_conforms_up_to_scale(
        capture_qk(model, token_inputs(model.config)), layers, shared_across_heads=False
    )
    scores = attngeom.score(tmp_path, progress=False)
    assert set(scores["objective"]) == {"bidirectional"}


@pytest.mark.parametrize(("make", "stacks"), [(gemma3, GEMMA3_STACKS), (llama4, ["vision", "decoder"])])
def test_engine_on_disk_and_in_memory(make, stacks, tmp_path):
    model = make()
    model.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    assert set(on_disk["objective"]) == {"autoregressive"}
    assert list(on_disk["stack"].unique()) == stacks
    for column in ("symmetry", "directionality", "norm"):
        torch.testing.assert_close(
            torch.tensor(on_disk[column].to_numpy()), torch.tensor(in_memory[column].to_numpy())
        )
