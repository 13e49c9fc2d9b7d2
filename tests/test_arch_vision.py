"""Conformance of the vision families (tiny configs: 32 × 32 images, patch 8, width ≤ 64)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conformance import (
    TEXT_SIZES,
    VISION_SIZES,
    Capture,
    assert_conforms,
    build,
    capture_fused_qkv,
    capture_method_qk,
    capture_projections,
    capture_qk_pairs,
    capture_torch_multihead,
    forward,
    layers_from_disk,
    removed_after,
    scored,
    tiny_config,
)
from transformers import (
    AutoModel,
    CLIPTextModel,
    CLIPVisionModel,
    DPTForDepthEstimation,
    ViTMAEForPreTraining,
)

import attngeom
from attngeom.architectures import architecture_for

BATCH = 2
VIT_SIZES = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=32,
    image_size=32,
    patch_size=8,
)
SWIN_SIZES = dict(embed_dim=16, depths=[1, 2], num_heads=[2, 4], image_size=32, patch_size=4, window_size=4)


def _pixels(config=None) -> dict:
    g = torch.Generator().manual_seed(3)
    return {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=g, dtype=torch.float64)}


def _video(config=None, frames: int = 4) -> dict:
    g = torch.Generator().manual_seed(3)
    return {"pixel_values": torch.randn(BATCH, frames, 3, 32, 32, generator=g, dtype=torch.float64)}


def _towers(model_type: str, vision_width: int = 24, vision_heads: int = 3) -> dict:
    """Text and vision towers of different widths (SigLIP compares their pooled outputs: same width)."""
    text = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32, vocab_size=100
    )
    vision = dict(hidden_size=vision_width, num_hidden_layers=2, num_attention_heads=vision_heads)
    vision.update(intermediate_size=32, image_size=32, patch_size=8)
    return tiny_config(model_type, text_config=text, vision_config=vision)


def _towers_inputs(config) -> dict:
    ids = torch.randint(0, 100, (BATCH, 7), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, **_pixels()}


def _imagegpt_inputs(config) -> dict:
    return {"input_ids": torch.randint(0, 16, (BATCH, 9), generator=torch.Generator().manual_seed(1))}


# model_type → (config, model class, inputs)
CASES = {
    **{
        name: (lambda name=name: tiny_config(name, **VIT_SIZES), AutoModel, _pixels)
        for name in ("vit", "deit", "vit_msn", "dinov2", "dinov2_with_registers", "beit", "data2vec-vision")
    },
    "yolos": (
        lambda: tiny_config("yolos", **{**VIT_SIZES, "image_size": [32, 32]}, num_detection_tokens=3),
        AutoModel,
        _pixels,
    ),
    "vit_mae": (
        lambda: tiny_config(
            "vit_mae",
            **VIT_SIZES,
            decoder_hidden_size=24,
            decoder_num_hidden_layers=2,
            decoder_num_attention_heads=3,
            decoder_intermediate_size=32,
        ),
        SimpleNamespace(from_config=ViTMAEForPreTraining),
        _pixels,
    ),
    "swin": (lambda: tiny_config("swin", **SWIN_SIZES), AutoModel, _pixels),
    "swinv2": (lambda: tiny_config("swinv2", **SWIN_SIZES), AutoModel, _pixels),
    "clip": (lambda: _towers("clip"), AutoModel, _towers_inputs),
    "siglip": (lambda: _towers("siglip", 32, 2), AutoModel, _towers_inputs),
    "git": (
        lambda: tiny_config("git", **TEXT_SIZES, vision_config=VISION_SIZES),
        AutoModel,
        _towers_inputs,
    ),
    "imagegpt": (
        lambda: tiny_config("imagegpt", n_embd=32, n_layer=2, n_head=4, vocab_size=17, n_positions=16),
        AutoModel,
        _imagegpt_inputs,
    ),
    "videomae": (
        lambda: tiny_config("videomae", **VIT_SIZES, num_frames=4, tubelet_size=2),
        AutoModel,
        _video,
    ),
    "vivit": (
        lambda: tiny_config(
            "vivit",
            **{key: value for key, value in VIT_SIZES.items() if key != "patch_size"},
            num_frames=4,
            tubelet_size=[2, 8, 8],
        ),
        AutoModel,
        _video,
    ),
    "timesformer": (
        lambda: tiny_config("timesformer", **VIT_SIZES, num_frames=2),
        AutoModel,
        lambda config: _video(config, frames=2),
    ),
    "dpt": (
        lambda: tiny_config(
            "dpt", **VIT_SIZES, backbone_out_indices=[0, 1], neck_hidden_sizes=[8, 16], fusion_hidden_size=16
        ),
        AutoModel,
        _pixels,
    ),
    "dpt_dinov2": (
        lambda: tiny_config(
            "dpt",
            backbone_config=dict(
                model_type="dinov2", **VIT_SIZES, out_indices=[1, 2], reshape_hidden_states=False
            ),
            hidden_size=32,
            neck_hidden_sizes=[8, 16],
            reassemble_factors=[1, 1],
            fusion_hidden_size=16,
        ),
        SimpleNamespace(from_config=DPTForDepthEstimation),
        _pixels,
    ),
}


def _capture(model_type: str, model, inputs):
    if model_type == "data2vec-vision":
        from transformers.models.data2vec.modeling_data2vec_vision import Data2VecVisionSelfAttention

        return capture_projections(model, inputs, Data2VecVisionSelfAttention, "query", "key")
    if model_type == "swinv2":
        from transformers.models.swinv2.modeling_swinv2 import Swinv2SelfAttention

        return capture_projections(model, inputs, Swinv2SelfAttention, "query", "key")
    if model_type == "timesformer":
        from transformers.models.timesformer.modeling_timesformer import TimesformerSelfAttention

        return capture_fused_qkv(model, inputs, TimesformerSelfAttention)
    if model_type == "imagegpt":
        # ImageGPT bypasses the attention interface: its own ``_attn(query, key, value)`` gets q and k
        return capture_method_qk(model, inputs, "_attn", lambda module, args, result: args[:2])
    if model_type == "git":  # the vision tower uses the attention interface, the text decoder does not
        from transformers.models.git.modeling_git import GitSelfAttention

        vision = capture_qk_pairs(
            model, inputs, module_filter=lambda m: type(m).__name__ == "GitVisionAttention"
        )
        return vision + capture_projections(model, inputs, GitSelfAttention, "query", "key")
    if model_type in ("clip", "siglip"):  # one run per tower, text first as the map yields them
        captures = []
        for tower in (model.text_model, model.vision_model):
            own = {id(m) for m in tower.modules() if type(m).__name__ in ("CLIPAttention", "SiglipAttention")}
            captures += capture_qk_pairs(model, inputs, module_filter=lambda m, own=own: id(m) in own)
        return captures
    return capture_qk_pairs(model, inputs)


@pytest.fixture(scope="module")
def built() -> dict:
    cache: dict = {}

    def get(model_type: str):
        if model_type not in cache:
            make_config, model_class, inputs = CASES[model_type]
            cache[model_type] = (build(make_config(), model_class), inputs)
        return cache[model_type]

    return get


def _temporal_first(layers: list) -> list:
    """TimeSformer runs, per block, its temporal attention before the spatial one."""
    return sorted(layers, key=lambda layer: (layer.layer, "temporal" not in layer.stack))


CALL_ORDER = {"timesformer": _temporal_first}
"""Where the model's calls interleave discovery's stacks (listed stack after stack)."""


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_forward_pass_conformance_from_disk(model_type, built, tmp_path):
    model, inputs = built(model_type)
    layers = layers_from_disk(model, tmp_path)
    captures = _capture(model_type, model, inputs(model.config))
    assert_conforms(captures, CALL_ORDER.get(model_type, list)(scored(layers)))
    assert architecture_for(model.config).n_layers(model.config) == len(scored(layers))


@pytest.mark.parametrize(
    "model_type",
    ["vit", "dinov2", "beit", "vit_mae", "swin", "swinv2", "clip", "git", "imagegpt", "videomae"]
    + ["timesformer", "dpt_dinov2"],
)
def test_disk_and_memory_agree(model_type, built, tmp_path):
    model, _ = built(model_type)
    model.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    assert len(on_disk) == len(in_memory) > 0
    np.testing.assert_allclose(on_disk["symmetry"].to_numpy(float), in_memory["symmetry"].to_numpy(float))


def test_vit_mae_has_encoder_and_decoder_stacks(built, tmp_path):
    model, _ = built("vit_mae")
    layers = layers_from_disk(model, tmp_path)
    assert [(layer.stack, layer.n_heads) for layer in layers] == [("encoder", 4)] * 2 + [("decoder", 3)] * 2


def test_swin_stages_have_their_own_widths_and_heads(built, tmp_path):
    model, _ = built("swin")
    model.save_pretrained(tmp_path)
    frame = attngeom.score(tmp_path, progress=False)
    layer_rows = frame[frame["head"].isna()]
    assert list(layer_rows["hidden_size"]) == [16, 32, 32]
    assert list(layer_rows["n_heads"]) == [2, 4, 4]
    assert list(layer_rows["layer"]) == [0, 1, 2]


def test_clip_towers_are_separate_stacks_with_their_modality(built, tmp_path):
    model, _ = built("clip")
    model.save_pretrained(tmp_path)
    frame = attngeom.score(tmp_path, progress=False)
    modality = frame.groupby("stack")["modality"].unique().map(list).to_dict()
    assert modality == {"text_model_encoder": ["language"], "vision_model_encoder": ["vision"]}
    assert set(frame[frame["stack"] == "vision_model_encoder"]["hidden_size"]) == {24}


def test_beit_key_has_no_bias(built, tmp_path):
    model, _ = built("beit")
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.b_k is None and layer.b_q is not None for layer in layers)


STACK = {"text": "decoder", "vision": "encoder"}
"""A CLIP tower's one stack, named by its objective: the text tower is causal."""


def test_single_clip_towers(tmp_path):
    config = _towers("clip")
    for model_class, sub, stack in (
        (CLIPTextModel, config.text_config, "text"),
        (CLIPVisionModel, config.vision_config, "vision"),
    ):
        model = build(sub, SimpleNamespace(from_config=model_class))
        model.save_pretrained(tmp_path / stack)
        frame = attngeom.score(tmp_path / stack, progress=False)
        assert set(frame["stack"]) == {STACK[stack]} and len(frame) == 2 * (sub.num_attention_heads + 1)


SAM_SIZES = dict(
    vision_config=dict(
        hidden_size=32,
        output_channels=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=8,
        window_size=2,
        global_attn_indexes=[1],
        num_pos_feats=8,
        mlp_dim=32,
    ),
    prompt_encoder_config=dict(hidden_size=16, image_size=64, patch_size=8, mask_input_channels=4),
    mask_decoder_config=dict(
        hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mlp_dim=32, iou_head_hidden_dim=16
    ),
)


def _capture_sam_encoder(model, inputs) -> list[Capture]:
    """The image encoder's fused ``qkv`` output, split exactly as SamVisionAttention.forward does."""
    from transformers.models.sam.modeling_sam import SamVisionAttention

    captures: list[Capture] = []
    handles = []
    for module in model.modules():
        if isinstance(module, SamVisionAttention):

            def hook(qkv, args, output, heads=module.num_attention_heads):
                x = args[0].flatten(1, 2)  # (B, H, W, d) → (B, H·W, d)
                q, k, _ = output.reshape(x.shape[0], x.shape[1], 3, heads, -1).permute(2, 0, 3, 1, 4)
                captures.append(Capture(x.detach(), q.detach(), k.detach()))

            handles.append(module.qkv.register_forward_hook(hook))
    with removed_after(handles):
        forward(model, inputs)
    return captures


def test_sam_encoder_and_two_way_decoder_conform(tmp_path):
    model = build(tiny_config("sam", **SAM_SIZES))
    layers = layers_from_disk(model, tmp_path)
    g = torch.Generator().manual_seed(3)
    inputs = {
        "pixel_values": torch.randn(BATCH, 3, 64, 64, generator=g, dtype=torch.float64),
        "input_points": torch.rand(BATCH, 1, 3, 2, generator=g, dtype=torch.float64) * 64,
    }
    encoder = _capture_sam_encoder(model, inputs)
    decoder = capture_qk_pairs(
        model,
        inputs,
        lambda module, arguments: (arguments["query"].flatten(0, -3), arguments["key"].flatten(0, -3)),
        module_filter=lambda m: type(m).__name__ == "SamAttention",
    )
    by_stack = {
        stack: [layer for layer in layers if layer.stack == stack]
        for stack in dict.fromkeys(l.stack for l in layers)
    }
    # Call order: per decoder layer self, token→image, image→token; then the final token→image.
    calls = [by_stack["encoder"]]
    for i in range(2):
        calls.append(
            [by_stack["decoder"][i], by_stack["cross_token_to_image"][i], by_stack["cross_image_to_token"][i]]
        )
    calls.append([by_stack["cross_token_to_image"][2]])
    ordered = [layer for group in calls for layer in group]
    assert len(ordered) == len(layers) == 2 + 3 * 2 + 1
    assert_conforms(encoder + decoder, ordered)
    frame = attngeom.score(tmp_path, progress=False)
    cross = frame["stack"].isin(["cross_token_to_image", "cross_image_to_token"])
    assert frame[cross]["symmetry"].isna().all() and frame[~cross]["symmetry"].notna().all()
    assert set(frame[frame["stack"] == "cross_token_to_image"]["head_dim"]) == {
        4
    }  # 16 / downsample 2 / 2 heads
    in_memory = attngeom.score(model, progress=False)
    np.testing.assert_allclose(frame["norm"].to_numpy(float), in_memory["norm"].to_numpy(float))


MASK2FORMER_SIZES = dict(
    hidden_dim=32,
    mask_feature_size=32,
    feature_size=32,
    encoder_feedforward_dim=32,
    dim_feedforward=32,
    num_attention_heads=4,
    encoder_layers=1,
    decoder_layers=3,
    num_queries=5,
    backbone_config=dict(
        model_type="swin",
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 2, 2],
        image_size=64,
        patch_size=4,
        window_size=2,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    ),
)


def _packed_projection(query, key, value, in_proj_weight, in_proj_bias, kwargs):
    """nn.MultiheadAttention (fused ``in_proj``): the q/k torch itself projects (``F._in_projection_packed``)."""
    q, k, _ = F._in_projection_packed(query, key, value, in_proj_weight, in_proj_bias)
    return q, k


def test_mask2former_backbone_decoder_and_masked_cross_attention_conform(tmp_path):
    from transformers.models.mask2former.modeling_mask2former import Mask2FormerAttention

    model = build(tiny_config("mask2former", **MASK2FORMER_SIZES))
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["backbone"] * 4 + ["decoder"] * 2 + ["cross"] * 2
    inputs = {
        "pixel_values": torch.randn(BATCH, 3, 64, 64, generator=torch.Generator().manual_seed(3)).double()
    }
    backbone = {id(m) for m in model.pixel_level_module.encoder.modules()}
    captures = capture_qk_pairs(model, inputs, module_filter=lambda m: id(m) in backbone)

    def self_inputs(module, arguments):  # the module takes (N, B, E) and adds the query positions itself
        x = (arguments["hidden_states"] + arguments["position_embeddings"]).transpose(0, 1)
        return x, x

    captures += capture_projections(model, inputs, Mask2FormerAttention, "q_proj", "k_proj", self_inputs)
    captures += capture_torch_multihead(model, inputs, _packed_projection)
    assert_conforms(captures, layers)
    frame = attngeom.score(tmp_path, progress=False)
    assert frame[frame["stack"] == "cross"]["symmetry"].isna().all()
    assert list(frame[frame["head"].isna() & (frame["stack"] == "backbone")]["hidden_size"]) == [
        16,
        32,
        64,
        128,
    ]


def test_mllama_vision_decoder_and_qk_normalised_cross_attention(tmp_path):
    """Vision and text self-attention conform exactly; the cross form reproduces the model's normalised
    q·k up to the per-token-and-head 1/rms scalars read from its own q/k norm inputs (float32 norms)."""
    config = tiny_config(
        "mllama",
        text_config=dict(
            hidden_size=32,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=32,
            vocab_size=100,
            pad_token_id=1,
            cross_attention_layers=[1, 3],
        ),
        vision_config=dict(
            hidden_size=32,
            num_hidden_layers=2,
            num_global_layers=1,
            attention_heads=4,
            intermediate_size=32,
            image_size=16,
            patch_size=8,
            max_num_tiles=2,
            supported_aspect_ratios=[[1, 1], [1, 2]],
            intermediate_layers_indices=[0, 1],
            vision_output_dim=96,
        ),
    )
    model = build(config)
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["vision"] * 3 + ["decoder"] * 2 + ["cross"] * 2
    g = torch.Generator().manual_seed(3)
    inputs = {
        "input_ids": torch.randint(2, 100, (1, 7), generator=g),
        "position_ids": torch.zeros(1, 7, dtype=torch.long),
        "pixel_values": torch.randn(1, 1, 2, 3, 16, 16, generator=g, dtype=torch.float64),
        "aspect_ratio_ids": torch.tensor([[1]]),
        "aspect_ratio_mask": torch.ones(1, 1, 2, dtype=torch.long),
        "cross_attention_mask": torch.ones(1, 7, 1, 2, dtype=torch.long),
    }
    scalars: dict[str, list[torch.Tensor]] = {"q_norm": [], "k_norm": []}

    def record(name):
        def hook(module, args):
            scalars[name].append(torch.rsqrt(args[0].pow(2).mean(-1) + module.variance_epsilon))

        return hook

    hooks = [
        module.register_forward_pre_hook(record(name.rsplit(".", 1)[1]))
        for name, module in model.named_modules()
        if name.endswith(("cross_attn.q_norm", "cross_attn.k_norm"))
    ]

    def inputs_of(module, arguments):
        x = arguments["hidden_states"]
        y = arguments.get("cross_attention_states")
        return x, (x if y is None else y.reshape(x.shape[0], -1, y.shape[-1]))  # as the module views it

    try:
        captures = capture_qk_pairs(model, inputs, inputs_of)
    finally:
        for hook in hooks:
            hook.remove()
    by_module = {"vision": captures[:3], "text": captures[3:]}
    text_layers = [layers[3], layers[5], layers[4], layers[6]]  # call order: self 0, cross 1, self 2, cross 3
    assert_conforms(by_module["vision"], layers[:3])
    assert_conforms([by_module["text"][0], by_module["text"][2]], [text_layers[0], text_layers[2]])
    for j, (capture, layer) in enumerate(
        ((by_module["text"][1], layers[5]), (by_module["text"][3], layers[6]))
    ):
        s_q, s_k = scalars["q_norm"][j], scalars["k_norm"][j]  # (B, H, N), (B, H_kv, M)
        q = torch.einsum("bnd,hde->bhne", capture.x, layer.w_q.unflatten(1, (4, -1)).permute(1, 0, 2))
        k = torch.einsum("bmd,hde->bhme", capture.x_k, layer.w_k.unflatten(1, (2, -1)).permute(1, 0, 2))
        ours = (
            (q @ k.repeat_interleave(2, dim=1).mT)
            * s_q[..., None]
            * s_k.repeat_interleave(2, dim=1)[:, :, None]
        )
        theirs = capture.q @ capture.k.repeat_interleave(2, dim=1).mT
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5 * theirs.abs().max().item())
    frame = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    np.testing.assert_allclose(frame["norm"].to_numpy(float), in_memory["norm"].to_numpy(float))
    assert frame[frame["stack"] == "cross"]["symmetry"].isna().all()
    assert dict(frame.groupby("stack")["modality"].first()) == {
        "cross": "multimodal",
        "decoder": "language",
        "vision": "vision",
    }


def test_vit_without_qkv_bias(tmp_path):
    model = build(tiny_config("vit", **VIT_SIZES, qkv_bias=False))
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.b_q is None and layer.b_k is None and "bias" not in layer.left_out for layer in layers)
    assert_conforms(capture_qk_pairs(model, _pixels()), layers)


def test_mask2former_with_an_unmapped_backbone_is_refused():
    from attngeom.architectures import ArchitectureError, architecture_for

    config = tiny_config("mask2former", backbone_config=dict(model_type="convnext"))
    with pytest.raises(ArchitectureError, match="backbone is not supported"):
        next(iter(architecture_for(config).layers(config, None)))


def test_timesformer_divided_attention_is_two_stacks(built, tmp_path):
    model, _ = built("timesformer")
    layers = layers_from_disk(model, tmp_path)
    assert [(layer.stack, layer.layer) for layer in layers] == [
        ("encoder_attention", 0),
        ("encoder_attention", 1),
        ("encoder_temporal_attention", 0),
        ("encoder_temporal_attention", 1),
    ]
    space_only = tiny_config("timesformer", **VIT_SIZES, num_frames=2, attention_type="space_only")
    model = build(space_only)
    layers = layers_from_disk(model, tmp_path / "space_only")
    assert [layer.stack for layer in layers] == ["encoder", "encoder"]
    assert_conforms(
        capture_fused_qkv(model, _video(frames=2), type(model.encoder.layer[0].attention.attention)), layers
    )


def test_videomae_query_bias_is_read_under_its_saved_name(built, tmp_path):
    """VideoMAE saves its query bias as ``q_bias`` (its key has none): the map finds it."""
    model, _ = built("videomae")
    layers = layers_from_disk(model, tmp_path)
    from safetensors import safe_open

    with safe_open(tmp_path / "model.safetensors", "pt") as handle:
        assert "encoder.layer.0.attention.attention.q_bias" in set(handle.keys())
    assert all(layer.b_q is not None and layer.b_k is None and "bias" in layer.left_out for layer in layers)


def test_dpt_backbone_is_scored_by_its_own_map(built, tmp_path):
    model, _ = built("dpt_dinov2")
    model.save_pretrained(tmp_path)
    frame = attngeom.score(tmp_path, progress=False)
    assert set(frame["stack"]) == {"backbone"} and set(frame["modality"]) == {"vision"}
    assert len(frame) == 2 * (4 + 1)
