"""Conformance of the composites: each tower scored by its own family's map, under its own stack.

Every case builds the model class the Hub checkpoints are saved from, saves it, reads the towers back
from disk and checks every head of every tower against the q·k the model computed in one forward pass.
Rotary embeddings (language models, Pixtral's and Qwen2-VL's 2-D vision rotary) are made the identity.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers
from conformance import (
    TEXT_SIZES,
    VISION_SIZES,
    Capture,
    assert_conforms,
    build,
    capture_fused_qkv,
    capture_projections,
    capture_qk_pairs,
    layers_from_disk,
    rotary_neutralised,
    scored,
    tiny_config,
)

import attngeom
from attngeom.architectures import ArchitectureError, AttentionLayer, architecture_for

LANGUAGE = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=32,
    vocab_size=128,
)
IMAGE_TOKEN = 100


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(3)


def _image() -> torch.Tensor:
    return torch.randn(1, 3, 32, 32, generator=_generator(), dtype=torch.float64)


def _prompt(image_tokens: int, token: int = IMAGE_TOKEN) -> torch.Tensor:
    text = torch.randint(0, 90, (1, 5), generator=_generator())
    return torch.cat([torch.full((1, image_tokens), token), text], 1)


def _interface(model, inputs) -> list[Capture]:
    """Towers on transformers' attention interface; hidden states as the modules see them (Qwen2-VL's
    vision packs one sequence without a batch dimension)."""

    def inputs_of(module, arguments):
        x = arguments["hidden_states"]
        x = x if x.dim() == 3 else x[None]
        return x, x

    with rotary_neutralised(model):
        return capture_qk_pairs(model, inputs, inputs_of, module_filter=lambda m: hasattr(m, "q_proj"))


def _qwen_vl(model, inputs) -> list[Capture]:
    """The vision blocks' fused qkv (before their 2-D rotary), then the language model."""
    vision = type(model.model.visual.blocks[0].attn)
    return capture_fused_qkv(model, inputs, vision) + _interface(model, inputs)


def _blip_capture(model, inputs) -> list[Capture]:
    from transformers.models.blip.modeling_blip import BlipAttention
    from transformers.models.blip.modeling_blip_text import BlipTextSelfAttention

    text = capture_projections(model, inputs, BlipTextSelfAttention, "query", "key")
    return capture_fused_qkv(model, inputs, BlipAttention) + text


def _blip2_capture(model, inputs) -> list[Capture]:
    """Vision (fused qkv), the Q-Former, then the language model (OPT scales q before the attention call:
    undone here, as the map leaves the scale out)."""
    from transformers.models.blip_2.modeling_blip_2 import Blip2Attention

    captures = capture_fused_qkv(model, inputs, Blip2Attention)
    captures += capture_qk_pairs(model, inputs, module_filter=lambda m: hasattr(m, "query"))
    language = capture_qk_pairs(
        model,
        inputs,
        module_filter=lambda m: type(m).__name__ in ("OPTAttention", "T5Attention"),
    )
    scalings = [
        getattr(m, "scaling", 1.0)
        for m in model.language_model.modules()
        if type(m).__name__ == "OPTAttention"
    ]
    if scalings:
        language = [Capture(c.x, c.q / s, c.k, c.x_k) for c, s in zip(language, scalings, strict=True)]
    return captures + language


def _clap(model, inputs) -> list[Capture]:
    from transformers.models.clap.modeling_clap import ClapAudioSelfAttention, ClapTextSelfAttention

    text = capture_projections(model, inputs, ClapTextSelfAttention, "query", "key")
    return text + capture_projections(model, inputs, ClapAudioSelfAttention, "query", "key")


def _by_stack(layers: list[AttentionLayer]) -> dict[str, list[AttentionLayer]]:
    stacks: dict[str, list[AttentionLayer]] = {}
    for layer in layers:
        stacks.setdefault(layer.stack, []).append(layer)
    return stacks


def _interleaved(first: list[AttentionLayer], then: list[AttentionLayer]) -> list[AttentionLayer]:
    """Per layer index, ``first``'s layer then ``then``'s (self- before cross-attention)."""
    later = {layer.layer: layer for layer in then}
    return [x for layer in first for x in (layer, later.get(layer.layer)) if x is not None]


def _blip_order(layers: list[AttentionLayer]) -> list[AttentionLayer]:
    stacks = _by_stack(layers)
    text = [name for name in stacks if name != "vision" and not name.endswith("_cross")]
    return stacks["vision"] + [
        x for name in text for x in _interleaved(stacks[name], stacks[f"{name}_cross"])
    ]


def _blip2_order(layers: list[AttentionLayer]) -> list[AttentionLayer]:
    stacks = _by_stack(layers)
    order = stacks["vision"] + _interleaved(stacks["qformer"], stacks["qformer_cross"]) + stacks["text"]
    if "text_decoder" in stacks:  # T5: encoder, then per decoder layer self- and cross-attention
        order += _interleaved(stacks["text_decoder"], stacks["text_decoder_cross"])
    return order


DISCOVERED_LLAVA = ("vision_tower_encoder", "language_model")
"""Discovery's stack names for a LLaVA-layout model it scores (PaliGemma): the words of the module paths."""


@dataclass(frozen=True)
class Case:
    config: Callable[[], transformers.PretrainedConfig]
    model_class: str
    inputs: Callable[[], dict]
    capture: Callable = _interface
    call_order: Callable[[list[AttentionLayer]], list[AttentionLayer]] = list
    stacks: tuple[str, ...] = ("vision", "text")


def _llava(vision: dict, text: str = "llama", **extra):
    return lambda: tiny_config(
        "llava",
        text_config={**LANGUAGE, "model_type": text},
        vision_config=vision,
        image_token_index=IMAGE_TOKEN,
        **extra,
    )


def _qwen(model_type: str, vision: dict):
    return lambda: tiny_config(
        model_type,
        text_config={**LANGUAGE, "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}},
        vision_config={**vision, "depth": 2, "num_heads": 2, "patch_size": 4},
        image_token_id=IMAGE_TOKEN,
        video_token_id=101,
        vision_start_token_id=102,
    )


def _qwen_inputs() -> dict:
    """A 4 × 4 grid of patches (4 tokens after the 2 × 2 merge) after a vision-start token."""
    ids = torch.cat([torch.tensor([[102]]), _prompt(4)], 1)
    return {
        "input_ids": ids,
        "pixel_values": torch.randn(16, 3 * 2 * 4 * 4, generator=_generator(), dtype=torch.float64),
        "image_grid_thw": torch.tensor([[1, 4, 4]]),
        "mm_token_type_ids": (ids == IMAGE_TOKEN).long(),
    }


def _blip2_config(text: dict):
    return lambda: tiny_config(
        "blip-2",
        text_config=text,
        vision_config=VISION_SIZES,
        qformer_config={**TEXT_SIZES, "encoder_hidden_size": 24, "cross_attention_frequency": 2},
        num_query_tokens=4,
        image_token_index=99,
    )


def _blip2_inputs(decoder: bool) -> Callable[[], dict]:
    def inputs() -> dict:
        result = {"input_ids": _prompt(4, 99), "pixel_values": _image()}
        if decoder:
            result["decoder_input_ids"] = torch.randint(0, 90, (1, 3), generator=_generator())
        return result

    return inputs


def _text_and_image() -> dict:
    return {"input_ids": torch.randint(3, 90, (1, 7), generator=_generator()), "pixel_values": _image()}


CLIP_VISION = {**VISION_SIZES, "model_type": "clip_vision_model"}
PIXTRAL_VISION = {
    **VISION_SIZES,
    "model_type": "pixtral",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "head_dim": 8,
}
T5_TEXT = dict(model_type="t5", d_model=32, d_kv=8, d_ff=32, num_layers=2, num_heads=4, vocab_size=100)
OPT_TEXT = {**TEXT_SIZES, "model_type": "opt", "ffn_dim": 32, "word_embed_proj_dim": 32}

CASES = {
    "llava": Case(
        _llava(CLIP_VISION),
        "LlavaForConditionalGeneration",
        lambda: {"input_ids": _prompt(16), "pixel_values": _image()},
    ),
    "llava_pixtral": Case(
        _llava(PIXTRAL_VISION, "mistral", vision_feature_layer=-1, vision_feature_select_strategy="full"),
        "LlavaForConditionalGeneration",
        lambda: {"input_ids": _prompt(16), "pixel_values": _image(), "image_sizes": torch.tensor([[32, 32]])},
    ),
    "llava_next": Case(
        lambda: tiny_config(
            "llava_next",
            text_config={**LANGUAGE, "model_type": "mistral"},
            vision_config=CLIP_VISION,
            image_token_index=IMAGE_TOKEN,
            image_grid_pinpoints=[[32, 32]],
        ),
        "LlavaNextForConditionalGeneration",
        lambda: {
            "input_ids": _prompt(36),  # base image 16 + one 32 × 32 tile 16 + a newline per tile row 4
            "pixel_values": torch.randn(1, 2, 3, 32, 32, generator=_generator(), dtype=torch.float64),
            "image_sizes": torch.tensor([[32, 32]]),
        },
    ),
    "paligemma": Case(
        lambda: tiny_config(
            "paligemma",
            text_config={**LANGUAGE, "model_type": "gemma", "head_dim": 8},
            vision_config={**VISION_SIZES, "model_type": "siglip_vision_model"},
            image_token_index=IMAGE_TOKEN,
            projection_dim=32,
        ),
        "PaliGemmaForConditionalGeneration",
        lambda: {"input_ids": _prompt(16), "pixel_values": _image()},
        stacks=DISCOVERED_LLAVA,
    ),
    "idefics3": Case(
        lambda: tiny_config(
            "idefics3",
            text_config={**LANGUAGE, "model_type": "llama"},
            vision_config=VISION_SIZES,
            image_token_id=IMAGE_TOKEN,
            scale_factor=2,
        ),
        "Idefics3ForConditionalGeneration",
        lambda: {"input_ids": _prompt(4), "pixel_values": _image()[:, None]},
        stacks=("vision_model_encoder", "text_model"),
    ),
    "qwen2_vl": Case(
        _qwen("qwen2_vl", {"embed_dim": 16, "hidden_size": 32, "mlp_ratio": 2}),
        "Qwen2VLForConditionalGeneration",
        _qwen_inputs,
        _qwen_vl,
        stacks=("visual", "language_model"),
    ),
    "qwen2_5_vl": Case(
        _qwen(
            "qwen2_5_vl",
            # one window covers the 4 × 4 grid, so the windowed layer 0 is one attention call
            {"hidden_size": 16, "out_hidden_size": 32, "intermediate_size": 32, "window_size": 16}
            | {"fullatt_block_indexes": [1]},
        ),
        "Qwen2_5_VLForConditionalGeneration",
        _qwen_inputs,
        _qwen_vl,
        stacks=("visual", "language_model"),
    ),
    "blip_itm": Case(
        lambda: tiny_config(
            "blip", text_config={**TEXT_SIZES, "encoder_hidden_size": 24}, vision_config=VISION_SIZES
        ),
        "BlipForImageTextRetrieval",
        _text_and_image,
        _blip_capture,
        _blip_order,
        ("vision", "text_encoder", "text_encoder_cross"),
    ),
    "blip_captioning": Case(
        lambda: tiny_config(
            "blip", text_config={**TEXT_SIZES, "encoder_hidden_size": 24}, vision_config=VISION_SIZES
        ),
        "BlipForConditionalGeneration",
        _text_and_image,
        _blip_capture,
        _blip_order,
        ("vision", "text_decoder", "text_decoder_cross"),
    ),
    "blip2_opt": Case(
        _blip2_config(OPT_TEXT),
        "Blip2ForConditionalGeneration",
        _blip2_inputs(decoder=False),
        _blip2_capture,
        _blip2_order,
        ("vision", "qformer", "qformer_cross", "text"),
    ),
    "blip2_t5": Case(
        _blip2_config(T5_TEXT),
        "Blip2ForConditionalGeneration",
        _blip2_inputs(decoder=True),
        _blip2_capture,
        _blip2_order,
        ("vision", "qformer", "qformer_cross", "text", "text_decoder", "text_decoder_cross"),
    ),
    "clap": Case(
        lambda: tiny_config(
            "clap",
            text_config=TEXT_SIZES,
            audio_config=dict(
                hidden_size=16,
                patch_embeds_hidden_size=8,
                depths=[1, 1],
                num_attention_heads=[2, 4],
                window_size=4,
                spec_size=32,
                num_mel_bins=16,
                patch_stride=4,
                patch_size=4,
            ),
            projection_dim=16,
        ),
        "ClapModel",
        lambda: {
            "input_ids": torch.randint(3, 90, (2, 7), generator=_generator()),
            "input_features": torch.randn(2, 1, 32, 16, generator=_generator(), dtype=torch.float64),
        },
        _clap,
        stacks=("text", "audio"),
    ),
}


@pytest.fixture(scope="module")
def built() -> Callable[[str], torch.nn.Module]:
    cache: dict = {}

    def get(name: str) -> torch.nn.Module:
        if name not in cache:
            case = CASES[name]
            model_class = getattr(transformers, case.model_class)
            cache[name] = build(case.config(), SimpleNamespace(from_config=model_class))
        return cache[name]

    return get


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_pass_conformance_from_disk(name, built, tmp_path):
    case = CASES[name]
    model = built(name)
    layers = layers_from_disk(model, tmp_path)
    assert list(dict.fromkeys(layer.stack for layer in scored(layers))) == list(case.stacks)
    captures = case.capture(model, case.inputs())
    assert_conforms(captures, case.call_order(scored(layers)))


@pytest.mark.parametrize("name", ["llava", "qwen2_vl", "blip2_opt", "clap"])
def test_disk_and_memory_agree(name, built, tmp_path):
    model = built(name)
    model.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    assert list(on_disk["stack"]) == list(in_memory["stack"]) and len(on_disk) > 0
    np.testing.assert_allclose(on_disk["norm"].to_numpy(float), in_memory["norm"].to_numpy(float))


def test_llava_towers_are_the_families_own_maps(built, tmp_path):
    """The language model scores exactly as the same Llama checkpoint on its own would (same q/k)."""
    model = built("llava")
    model.save_pretrained(tmp_path / "llava")
    frame = attngeom.score(tmp_path / "llava", progress=False)
    llama = model.model.language_model
    llama.save_pretrained(tmp_path / "llama")
    alone = attngeom.score(tmp_path / "llama", progress=False)
    text = frame[frame["stack"] == "text"]
    np.testing.assert_array_equal(text["symmetry"].to_numpy(float), alone["symmetry"].to_numpy(float))
    assert set(text["left_out"]) == set(alone["left_out"])
    assert dict(frame.groupby("stack")["modality"].first()) == {"text": "language", "vision": "vision"}
    assert set(frame["objective"]) == {"autoregressive"}
    config = model.config
    assert architecture_for(config).n_layers(config) == len(frame[frame["head"].isna()])


def test_stack_modality_and_objective_follow_the_towers(built, tmp_path):
    model = built("blip2_t5")
    model.save_pretrained(tmp_path)
    frame = attngeom.score(tmp_path, progress=False)
    modality = dict(frame.groupby("stack")["modality"].first())
    assert modality == {
        "vision": "vision",
        "qformer": "multimodal",
        "qformer_cross": "multimodal",
        "text": "language",
        "text_decoder": "language",
        "text_decoder_cross": "language",
    }
    assert set(frame["objective"]) == {"encoder-decoder"}  # the T5 language model's
    cross = frame["stack"].str.contains("cross")
    assert frame[cross]["symmetry"].isna().all() and frame[~cross]["symmetry"].notna().all()


def test_blip_holds_the_text_towers_its_checkpoint_has(tmp_path):
    """BlipModel: ``text_model``; VQA: ``text_encoder`` and ``text_decoder``, each with its cross stack."""
    config = tiny_config(
        "blip", text_config={**TEXT_SIZES, "encoder_hidden_size": 24}, vision_config=VISION_SIZES
    )
    stacks = {}
    for model_class in ("BlipModel", "BlipForQuestionAnswering"):
        model = build(config, SimpleNamespace(from_config=getattr(transformers, model_class)))
        layers = layers_from_disk(model, tmp_path / model_class)
        stacks[model_class] = list(dict.fromkeys(layer.stack for layer in layers))
    assert stacks == {
        "BlipModel": ["vision", "text", "text_cross"],
        "BlipForQuestionAnswering": [
            "vision",
            "text_encoder",
            "text_encoder_cross",
            "text_decoder",
            "text_decoder_cross",
        ],
    }
    assert architecture_for(config).modality_of("text_decoder_cross") == "multimodal"


def test_unmapped_language_model_is_refused_naming_the_tower(monkeypatch):
    config = tiny_config("llava", text_config={**LANGUAGE, "model_type": "llama"}, vision_config=CLIP_VISION)
    monkeypatch.delitem(attngeom.architectures.REGISTRY, "llama")
    with pytest.raises(ArchitectureError, match="llava text_config: unsupported model_type 'llama'"):
        list(architecture_for(config).layers(config, None))
