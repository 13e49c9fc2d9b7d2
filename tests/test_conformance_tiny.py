"""The tiny configs of the generated conformance: the derivation rules, on config entries and on the
installed transformers' own defaults (configs and meta-device models only: no weights, quick)."""

from __future__ import annotations

import pytest

from attngeom.architectures import ArchitectureError
from attngeom.architectures.discovery.attention import meta_model, model_class
from attngeom.conformance.refusals import build_refusal
from attngeom.conformance.tiny import _repaired, candidates, shrink, tiny_config


def _stages(n: int) -> list[str]:
    return ["stem"] + [f"stage{i}" for i in range(1, n + 1)]


def test_backbone_outputs_become_the_last_stages_of_the_shrunk_depth():
    entries = {"num_hidden_layers": 12, "stage_names": _stages(12), "out_indices": [9, 10, 11, 12]}
    out = shrink(entries | {"out_features": ["stage9", "stage10", "stage11", "stage12"]})
    assert out["num_hidden_layers"] == 4  # grown to hold the four outputs a DPT neck reads
    assert out["out_indices"] == [1, 2, 3, 4] and out["out_features"] == _stages(4)[1:]
    assert out["stage_names"] == _stages(4)
    one = shrink({"num_hidden_layers": 24, "stage_names": _stages(24), "out_indices": [0, 24]})
    assert one["num_hidden_layers"] == 2 and one["out_indices"] == [0, 2]  # the stem stays the stem
    config = tiny_config("depth_anything").backbone_config
    assert config.num_hidden_layers == 4 and config.out_indices == [1, 2, 3, 4]


def test_a_stage_count_is_not_shrunk_as_a_layer_count():
    out = shrink({"depths": [2, 2, 6, 2], "num_layers": 4, "num_heads": [3, 6, 12, 24]})
    assert out["num_layers"] == 4 and out["depths"] == [1, 1, 1, 1] and out["num_heads"] == [2, 2, 2, 2]
    backbone = tiny_config("grounding-dino").backbone_config
    assert len(backbone.depths) == backbone.num_layers == 4 and backbone.out_indices == [2, 3, 4]


def test_a_hierarchical_towers_window_fits_its_last_stage():
    swin = {"image_size": 224, "patch_size": 4, "depths": [2, 2, 6, 2], "window_size": 7}
    assert shrink(swin)["window_size"] == 2  # 64 px / 4 px patches = 16, halved thrice: 2
    assert shrink(swin | {"patch_size": 1, "depths": [1, 1]})["window_size"] == 7  # one that fits stays
    assert shrink({"image_size": 1024, "patch_size": 16, "window_size": 14})["window_size"] == 14  # no stages
    assert tiny_config("donut-swin").window_size == 2


def test_per_layer_config_keeps_the_kept_layers_renumbered_and_shrunk():
    kinds = ["sliding"] * 5 + ["full"]
    entries = {
        "num_hidden_layers": 6,
        "layer_types": kinds,
        "per_layer_config": {"02": {"head_dim": 512}, "05": {"head_dim": 512}},
        "num_key_value_heads_per_layer": [16, 16, 16, 16, 16, 8],
    }
    out = shrink(entries)
    assert out["layer_types"] == ["sliding", "full"]  # the first layer of each kind: 0 and 5
    assert out["per_layer_config"] == {"1": {"head_dim": 16}}  # layer 5 is now layer 1; layer 2 dropped
    assert out["num_key_value_heads_per_layer"] == [2, 2]
    text = tiny_config("gemma4_text")  # its defaults name layers 5, 11, ... 29 (the full-attention ones)
    assert text.layer_types == ["sliding_attention", "full_attention"]
    assert [layer.head_dim for layer in text.per_layer_config] == [16, 16]


def test_sizes_left_unset_and_attributes_the_model_reads_get_their_tiny_value():
    assert tiny_config("ministral").head_dim == 16  # its default is None; its model computes head_dim**-0.5
    assert tiny_config("t5gemma2_encoder").text_config.dropout_rate == 0.0  # read, never declared
    meta_model(tiny_config("moonshine_streaming"))


def test_the_second_candidate_keeps_the_relations_of_the_default_widths():
    from transformers import CONFIG_MAPPING

    mimi = list(candidates(CONFIG_MAPPING["mimi"]().to_dict()))[1]
    assert mimi["upsample_groups"] == mimi["hidden_size"] == 64  # equal by default (grouped convolution)
    falcon = list(candidates(CONFIG_MAPPING["falcon_h1"]().to_dict()))[1]
    assert falcon["mamba_d_ssm"] == falcon["mamba_n_heads"] * falcon["mamba_d_head"] < 1024
    esmc = list(candidates(CONFIG_MAPPING["esmc"]().to_dict()))[1]
    assert esmc["num_key_value_heads"] == esmc["num_attention_heads"] == 4  # no grouped-query attention
    cosmos = tiny_config("cosmos3_edge_text")
    assert sum(cosmos.rope_parameters["mrope_section"]) == cosmos.head_dim // 2


def test_a_fallback_at_the_default_widths_is_refused_above_the_size_cap():
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING["falcon_h1"].from_dict(
        list(candidates(CONFIG_MAPPING["falcon_h1"]().to_dict()))[2]
    )
    with pytest.raises(ValueError, match="parameters at the default widths"):
        _repaired(config, max_params=64_000_000)


def test_a_missing_optional_package_is_the_refusal_naming_it():
    timm = ImportError("TimmWrapperModel requires the timm library but it was not found in your environment.")
    assert build_refusal(timm).startswith("needs the timm package, whose torchvision dependency")
    scipy = ModuleNotFoundError("No module named 'scipy.optimize'", name="scipy.optimize")
    assert build_refusal(scipy) == "needs the scipy package, which is not installed"
    assert build_refusal(ValueError("in_channels must be divisible by groups")) is None


def test_a_model_class_no_auto_mapping_names_is_found_by_its_config_class():
    import transformers

    assert model_class("step3p5") is transformers.Step3p7TextModel  # Step3p7's text tower, legacy name
    assert model_class("speecht5_hifigan") is transformers.SpeechT5HifiGan
    with pytest.raises(ArchitectureError, match="configuration and processor only") as raised:
        model_class("layoutxlm")
    assert (
        build_refusal(raised.value)
        == "transformers defines no model for it (a configuration and processor only)"
    )


def test_second_candidate_rules_on_layer_counts_indices_and_unset_defaults():
    from transformers import CONFIG_MAPPING

    gemma = list(candidates(CONFIG_MAPPING["gemma3n_text"]().to_dict()))[1]
    assert gemma["num_kv_shared_layers"] == 15 * gemma["num_hidden_layers"] // 35  # its share, rounded down
    molmo = tiny_config("molmo2").adapter_config
    assert molmo.vision_feature_layer == [1, 0]  # [24, 18] of the default depth: the last two, in order
    assert tiny_config("time_series_transformer").prediction_length == 8  # no default horizon
    assert tiny_config("step3p5").sliding_window == 512  # sliding heads, no default window
    assert tiny_config("qwen2").sliding_window is None  # `use_sliding_window: False` keeps it unset


@pytest.mark.parametrize(
    ("model_type", "reason"),
    [
        ("layoutxlm", "a sub-config class (its config extends `layoutlmv2`'s; transformers defines no model"),
        ("timm_wrapper", "needs the timm package, whose torchvision dependency"),
        ("nougat", "transformers' default config of it does not build its model either (ValueError: "),
        ("pp_ocrv5_server_det", "no dot-product attention (its modeling code computes none, nor do its "),
        (
            "voxtral_realtime_text",
            "a sub-config, scored through its parent `voxtral_realtime` (transformers defines no "
            "VoxtralRealtimeTextModel of its own)",
        ),
    ],
)
def test_a_type_that_cannot_be_built_is_refused_with_its_specific_reason(model_type, reason):
    from attngeom.conformance.run import check_type

    entry = check_type(model_type)
    assert entry["status"] == "refused" and entry["reason"].startswith(reason), entry


def test_a_later_candidate_is_derived_only_when_the_earlier_fails():
    from transformers import CONFIG_MAPPING

    defaults = CONFIG_MAPPING["aria"]().to_dict()  # a dict keyed by ints: {1225: 128, 4900: 256}
    first = next(candidates(defaults))
    assert first == shrink(defaults)
    meta_model(tiny_config("aria"))


def test_a_periodic_attention_schedule_keeps_two_periods():
    """Zamba shares one attention block across its hybrid layers: one hybrid layer ties nothing."""
    config = tiny_config("zamba")
    assert config.num_hidden_layers == 4
    assert config.layer_types.count("hybrid") == 2


def test_a_width_that_is_the_sum_of_its_parts_stays_their_sum():
    """LongCat-Flash's q/k head width is its content and rotary parts' sum (its modules read it): shrunk,
    it stays the sum; a head width with its own tiny value keeps it even where two others add up to it."""
    out = shrink({"qk_head_dim": 192, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "hidden_size": 1024})
    assert out["qk_head_dim"] == out["qk_nope_head_dim"] + out["qk_rope_head_dim"] == 24
    other = shrink({"head_dim": 256, "index_head_dim": 128, "v_head_dim": 128})
    assert other["head_dim"] == 16
    config = tiny_config("longcat_flash")
    assert config.qk_head_dim == config.qk_nope_head_dim + config.qk_rope_head_dim


def test_only_a_config_without_a_model_is_traced_to_the_config_it_extends():
    """LayoutXLM's modular config extends LayoutLMv2's and transformers defines no model for it; a type
    with its own model (LayoutLMv3, whose config stands alone) is never traced so."""
    from attngeom.architectures.discovery.model_classes import config_base_of

    assert config_base_of("layoutxlm") == "layoutlmv2"
    assert config_base_of("layoutlmv3") is None and config_base_of("llama") is None


def test_a_size_the_config_derives_is_derived_again_from_the_tiny_sizes():
    """BROS computes ``dim_bbox_projection`` (width / heads) from its fields: the tiny config derives it
    from the tiny width, not the default model's 64."""
    config = tiny_config("bros")
    assert config.dim_bbox_projection == config.hidden_size // config.num_attention_heads == 16
    assert config.dim_bbox_sinusoid_emb_2d == config.hidden_size // 4


def test_a_fused_projection_split_in_equal_parts_keeps_as_many_kv_heads_as_heads():
    """transformers loads GradiumPhonon's fused ``in_proj`` by cutting it in three equal parts: its tiny
    config keeps kv heads = heads (else the saved model could not be read back); Llama keeps 2 of 4."""
    from attngeom.conformance.relations import equal_chunks

    assert equal_chunks("gradium_phonon_tts") and not equal_chunks("llama")
    config = tiny_config("gradium_phonon_tts")
    assert config.num_key_value_heads == config.num_attention_heads == 4
    assert tiny_config("llama").num_key_value_heads == 2


def test_a_count_of_layers_that_is_all_of_them_stays_all_of_them():
    out = shrink({"num_hidden_layers": 30, "num_kv_shared_layers": 30, "num_dense_layers": 3})
    assert out["num_hidden_layers"] == 2 and out["num_kv_shared_layers"] == 2
    assert out["num_dense_layers"] == 3  # some of the layers: not a count of all
    config = tiny_config("gemma4_unified_assistant").get_text_config()
    assert config.num_kv_shared_layers == config.num_hidden_layers
    meta_model(tiny_config("gemma4_unified_assistant"))  # built: its layers all share keys, as by default


def test_multi_head_defaults_keep_as_many_kv_heads_as_heads_in_the_second_config():
    from attngeom.conformance.relations import equal_heads
    from attngeom.conformance.tiny import equal_heads_config

    defaults = {"num_attention_heads": 8, "num_key_value_heads": 8, "sub": {"n_heads": 8, "n_kv_heads": 2}}
    tiny = {"num_attention_heads": 4, "num_key_value_heads": 2, "sub": {"n_heads": 4, "n_kv_heads": 2}}
    assert equal_heads(tiny, defaults) == tiny | {"num_key_value_heads": 4}  # GQA by default stays GQA
    config = tiny_config("granite_speech5_encoder")  # 8 heads, 8 kv heads by default
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    mha = equal_heads_config(config)
    assert (mha.num_attention_heads, mha.num_key_value_heads) == (4, 4)
    assert equal_heads_config(tiny_config("mistral")) is None  # 32 heads, 8 kv heads by default


def test_a_kv_head_count_the_config_lacks_is_its_head_count():
    """Moonshine Streaming's decoder reads ``num_key_value_heads``, which its config does not define."""
    config = tiny_config("moonshine_streaming")
    assert "num_key_value_heads" not in type(config)().to_dict()
    assert config.num_key_value_heads == config.num_attention_heads == 4


def test_structure_the_defaults_leave_unset_is_filled_as_the_model_reads_it():
    from transformers import CONFIG_MAPPING

    from attngeom.conformance.unset import fill_unset

    lfm2 = tiny_config("lfm2_moe")  # layer_types None; its model compares each with "conv"
    assert lfm2.layer_types == ["conv", "full_attention"]
    ocr = tiny_config("deepseek_ocr2").text_config  # mlp_layer_types and the router's top-k None
    assert set(ocr.mlp_layer_types) == {"sparse"} and ocr.num_experts_per_tok == 2
    assert tiny_config("chameleon").vocabulary_map == {}
    granite = tiny_config("granite4_vision")  # a map declared a list; a string its model parses
    assert granite.deepstack_layer_map == [] and granite.downsample_rate == "1/4"  # its docs' example
    compass = tiny_config("cohere_compass_text")  # rotary parameters keyed by layer kind, none given
    assert sum(compass.rope_parameters["full_attention"]["mrope_section"]) == compass.head_dim // 2
    plain = {"model_type": "llama", "num_hidden_layers": 2, "layer_types": None, "rope_parameters": {}}
    assert fill_unset(plain) == plain  # llama's model compares no layer kind; no kinds, no rope per kind
    meta_model(tiny_config("emu3"))
    assert fill_unset(CONFIG_MAPPING["qwen3"]().to_dict()) == CONFIG_MAPPING["qwen3"]().to_dict()


def test_entries_are_repaired_as_the_config_validator_says():
    from attngeom.conformance.validators import repaired

    entries = {"a": 3, "text_config": {"x": 256, "y": 16, "z": 8, "w": 1}, "vision_config": {"w": 5}}
    assert repaired(entries, "ValueError: x must be 0, got 256")["text_config"]["x"] == 0
    assert repaired(entries, "QSA requires w=1.")["vision_config"]["w"] == 1
    summed = repaired(entries, "SWA x must equal y + z")
    assert summed["text_config"]["x"] == 24 and summed["vision_config"] == {"w": 5}  # where its parts are
    assert repaired(entries, "ValueError: something else is wrong") is None
    assert repaired(entries | {"n": 2}, "a + w must equal n") is None  # a sum's last term is not the subject
    assert repaired(entries | {"n": 2}, "ValueError: a must match n")["a"] == 2
    assert repaired({"x": 0}, "x must be 0, got 0") is None  # nothing to change: no loop
    assistant = tiny_config("gemma4_assistant").text_config  # its defaults fail its own validator
    assert assistant.hidden_size_per_layer_input == 0
    assert assistant.num_kv_shared_layers == assistant.num_hidden_layers
    note = tiny_config("dots3_note_text").per_layer_config["sliding_attention"]
    assert note.head_dim == note.qk_nope_head_dim + note.qk_rope_head_dim
    qwen4 = tiny_config("qwen4_exp_text")  # QSA fields missing: the budget holds a whole tiny sequence
    assert qwen4.indexer_budget == 512 and qwen4.indexer_budget % qwen4.indexer_compress_ratio == 0


def test_an_attribute_the_model_reads_may_come_from_another_of_its_configs():
    config = tiny_config("qwen3_omni_moe")
    assert config.talker_config.spatial_merge_size == config.thinker_config.vision_config.spatial_merge_size
    meta_model(config)


def test_attention_with_a_query_projection_only_is_refused_saying_its_keys_are_shared():
    from attngeom.conformance.run import _no_attention_reason

    reason = _no_attention_reason(meta_model(tiny_config("gemma4_assistant")))
    assert reason.startswith("attention without key projections of its own (Gemma4TextAttention")
    assert _no_attention_reason(meta_model(tiny_config("mamba"))).startswith("no dot-product attention")


def test_a_model_that_builds_nowhere_has_no_attention_only_if_its_code_and_sub_models_have_none():
    from attngeom.conformance.run import _source_reason

    assert _source_reason("pp_ocrv6_medium_det").endswith("sub-models (`pp_lcnet_v4`))")
    assert _source_reason("llama") is None  # its code computes attention
    assert _source_reason("granite4_vision") is None


def test_a_timm_resnet_backbone_becomes_transformers_resnet_with_the_same_stages():
    timm = {"model_type": "timm_backbone", "backbone": "resnet50", "out_indices": [2, 3, 4]}
    out = shrink({"backbone_config": timm, "d_model": 256})
    assert out["backbone_config"]["model_type"] == "resnet"
    assert out["backbone_config"]["out_indices"] == [2, 3, 4]
    swin = timm | {"backbone": "swin_tiny_patch4_window7_224"}  # a backbone with attention of its own
    assert shrink({"backbone_config": swin})["backbone_config"]["model_type"] == "timm_backbone"
    meta_model(tiny_config("deformable_detr"))  # builds without timm, which cannot be installed here


def test_frozen_affine_buffers_are_randomised_like_parameters():
    from transformers.initialization import no_init_weights

    from attngeom.conformance.check import randomized

    with no_init_weights():  # leaves a batch norm's weight unset, which the frozen copy then holds
        model = randomized(model_class("deformable_detr").from_config(tiny_config("deformable_detr")))
    frozen = dict(model.named_buffers())
    weights = [b for n, b in frozen.items() if n.endswith("normalization.weight")]
    assert weights and all(w.abs().max() < 3 and w.std() > 0.1 for w in weights)
