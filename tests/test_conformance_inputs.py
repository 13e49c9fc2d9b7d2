"""The generated conformance's input makers: each family's tiny random model accepts one of the input
sets made from its forward's parameter names and its config (real transformers models, no mocks)."""

from __future__ import annotations

import torch

from attngeom.architectures.discovery.attention import Found, find_attention, model_class
from attngeom.conformance.check import capture, randomized
from attngeom.conformance.inputs import input_sets
from attngeom.conformance.tiny import tiny_config


def _model(model_type: str) -> torch.nn.Module:
    from transformers import AutoModel
    from transformers.initialization import no_init_weights

    config = tiny_config(model_type)
    with no_init_weights():
        cls = model_class(model_type)
        return randomized(cls.from_config(config) if cls is AutoModel else cls._from_config(config))


def _accepted(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The first input set the forward runs on (as the conformance tries them), or the last error."""
    error: Exception | None = None
    for inputs in input_sets(model):
        try:
            with torch.no_grad():
                model(**inputs)
            return inputs
        except Exception as err:  # noqa: BLE001 — the next set
            error = err
    raise AssertionError(f"no input set runs: {error}")


def test_patch_grid_tower_takes_flattened_patches_and_their_grid():
    model = _model("lfm3_vl_vision")
    inputs = _accepted(model)
    width = model.patch_embed.in_features
    assert inputs["grid_thw"].tolist() == [[1, 4, 4]]
    assert tuple(inputs["pixel_values"].shape) == (16, width)


def test_patch_grid_tower_with_a_convolution_gets_patches_as_it_reads_them():
    model = _model("kimi_k25_vision")
    inputs = _accepted(model)
    conv = model.patch_embed.proj
    assert tuple(inputs["pixel_values"].shape) == (16, conv.in_channels, *conv.kernel_size)


def test_mel_features_are_offered_time_first_after_mel_first():
    model = _model("parakeet_encoder")
    mel = model.config.num_mel_bins
    first = input_sets(model)[0]["input_features"]
    assert first.shape[1] == mel
    accepted = _accepted(model)["input_features"]
    assert accepted.shape[0] == 1 and accepted.shape[2] == mel


def test_stacked_frames_are_as_wide_as_the_first_linear_map_reads():
    model = _model("fun_asr_nano_encoder")
    inputs = _accepted(model)
    config = model.config
    assert inputs["input_features"].shape[-1] == config.num_mel_bins * config.num_stacked_frames
    assert tuple(inputs["input_features_mask"].shape) == tuple(inputs["input_features"].shape[:2])


def test_features_fill_whole_windows_and_come_with_their_mask():
    model = _model("qwen3_asr_encoder")
    inputs = _accepted(model)
    frames = inputs["input_features"].shape[-1]
    assert frames == 2 * model.config.n_window
    assert tuple(inputs["input_features_mask"].shape) == (1, frames)


def test_waveform_gets_a_channel_axis_where_the_model_reads_one():
    assert tuple(_accepted(_model("omniasr_ctc"))["input_values"].shape) == (1, 1, 4000)
    assert tuple(_accepted(_model("moonshine"))["input_values"].shape) == (1, 4000)


def test_one_kind_of_audio_per_set():
    model = _model("speech-encoder-decoder")
    sets = input_sets(model)
    assert all(not {"input_values", "input_features"} <= set(inputs) for inputs in sets)
    assert "input_values" in _accepted(model)


def test_region_features_take_their_widths_from_the_config():
    model = _model("lxmert")
    inputs = _accepted(model)
    assert inputs["visual_feats"].shape[-1] == model.config.visual_feat_dim
    assert inputs["visual_pos"].shape[-1] == model.config.visual_pos_dim


def test_a_decoder_alone_gets_states_to_cross_attend():
    decoder = _model("t5gemma").decoder
    inputs = _accepted(decoder)
    assert inputs["encoder_hidden_states"].shape[-1] == decoder.config.hidden_size
    assert "encoder_hidden_states" not in input_sets(_model("bert"))[0]


def test_tiny_multimodal_rotary_sections_fit_the_tiny_head():
    config = tiny_config("glm4v").text_config
    head = config.hidden_size // config.num_attention_heads
    assert sum(config.rope_parameters["mrope_section"]) == head // 2
    _accepted(_model("glm4v_text"))


def test_capture_runs_a_family_that_makes_its_masks_in_the_default_dtype():
    """xglm builds its own attention masks in the default dtype: float64 while the capture runs."""
    model = _model("xglm")
    items = [i for i in find_attention(model, model.config, "") if isinstance(i, Found)]
    records, error = capture(model, items)
    assert error is None
    assert items and all(records[i.path]["q"].dtype == torch.float64 for i in items)
    assert torch.get_default_dtype() == torch.float32


def test_a_required_stack_input_is_states_of_the_model_width():
    qformer = _model("granite_speech").projector.qformer
    inputs = _accepted(qformer)
    assert inputs["query_embeds"].shape[-1] == qformer.config.hidden_size
    assert inputs["encoder_hidden_states"].shape[-1] == qformer.config.encoder_hidden_size
    assert "inputs_embeds" not in input_sets(_model("bert"))[0]  # optional there: token ids instead


def test_images_reach_the_language_model_through_their_placeholder_tokens():
    """A VLM's whole forward with an image: one image token per image embedding, as many as the
    model's own get_image_features gives; the token fits the tiny text vocabulary."""
    model = _model("llava")
    token = model.config.image_token_id
    assert token < model.config.text_config.vocab_size
    inputs = _accepted(model)
    assert "pixel_values" in inputs
    with torch.no_grad():
        features = model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output
    count = sum(f.numel() // f.shape[-1] for f in features)
    assert (inputs["input_ids"] == token).sum().item() == count > 0


def test_an_omni_model_runs_whole_with_image_audio_and_text():
    """Placeholders for each medium (image and audio tokens together); the patch width from the vision
    tower's patch embedding, not the model's first linear map."""
    model = _model("qwen2_5_omni_thinker")
    inputs = _accepted(model)
    assert {"pixel_values", "image_grid_thw", "input_features"} <= set(inputs)
    ids = inputs["input_ids"]
    assert (ids == model.config.image_token_id).sum() > 0 and (ids == model.config.audio_token_id).sum() > 0


def test_every_kind_together_comes_before_the_main_kind_alone():
    """idefics2 takes image lists: the set of text with an image list (and its placeholders) runs, and
    comes before text alone, which would run too but never reach the vision towers."""
    model = _model("idefics2")
    inputs = _accepted(model)
    assert inputs["pixel_values"].dim() == 5
    assert (inputs["input_ids"] == model.config.image_token_id).sum() > 0


def test_multimodal_rotary_models_are_told_which_tokens_are_image_placeholders():
    """Qwen3-VL computes its M-RoPE positions from mm_token_type_ids: 1 at each image placeholder."""
    model = _model("qwen3_vl")
    inputs = _accepted(model)
    assert "pixel_values" in inputs
    placeholders = inputs["input_ids"] == model.config.image_token_id
    assert placeholders.any() and torch.equal(inputs["mm_token_type_ids"], placeholders.long())


def test_a_patch_grid_tower_that_names_its_patches_hidden_states_gets_them():
    tower = _model("qwen3_vl").visual
    inputs = _accepted(tower)
    assert inputs["grid_thw"].tolist() == [[1, 4, 4]] and inputs["hidden_states"].shape[0] == 16


def test_images_are_as_high_and_wide_as_the_config_says():
    """MGP-STR reads text lines of 32 × 128 pixels (``image_size`` as height and width)."""
    model = _model("mgp-str")
    assert tuple(_accepted(model)["pixel_values"].shape[-2:]) == tuple(model.config.image_size) == (32, 128)


def test_a_document_model_gets_one_ordered_box_per_token():
    """BROS requires word boxes (x0, y0, x1, y1), one per token, within its 2-D positions."""
    inputs = _accepted(_model("bros"))
    boxes = inputs["bbox"]
    assert boxes.shape == (*inputs["input_ids"].shape, 4)
    assert (boxes[..., 2] >= boxes[..., 0]).all() and (boxes[..., 3] >= boxes[..., 1]).all()


def test_inputs_the_model_embeds_itself_are_sized_by_its_embedding_layers():
    """Decision Transformer embeds states, actions and returns with linear maps and timesteps with a
    table of its own (``embed_state``, ``embed_timestep``): each input is what that layer reads."""
    model = _model("decision_transformer")
    inputs = _accepted(model)
    assert inputs["states"].shape[-1] == model.config.state_dim
    assert inputs["actions"].shape[-1] == model.config.act_dim and inputs["returns_to_go"].shape[-1] == 1
    assert inputs["timesteps"].dtype == torch.long and inputs["timesteps"].max() < model.config.max_ep_len


def test_states_a_child_reads_by_name_are_as_wide_as_that_child_reads():
    """Muse Glimmer's assistant requires the target model's concatenated layer states, which its context
    projection (``encoder.fc``) reads: they are as wide as that map's input, not the model's width."""
    model = _model("muse_glimmer_assistant")
    inputs = _accepted(model)
    assert (
        inputs["context_hidden_states"].shape[-1] == model.encoder.fc.in_features != model.config.hidden_size
    )


def test_a_prompt_image_and_its_mask_come_with_the_image_stacked_to_the_model_size():
    model = _model("seggpt")
    inputs = _accepted(model)
    height, width = model.config.image_size
    shape = (1, model.config.num_channels, height // 2, width)
    assert {
        name: tuple(inputs[name].shape) for name in ("pixel_values", "prompt_pixel_values", "prompt_masks")
    } == {
        "pixel_values": shape,
        "prompt_pixel_values": shape,
        "prompt_masks": shape,
    }


def test_a_main_input_name_given_as_a_list_takes_its_first_entry():
    """OneFormer names [pixel_values, task_inputs]: the images are its medium."""
    from transformers import AutoModel

    config = tiny_config("oneformer")
    cls = model_class("oneformer")
    model = cls.from_config(config) if cls is AutoModel else cls._from_config(config)
    assert isinstance(model.main_input_name, list)
    assert any("pixel_values" in inputs for inputs in input_sets(model))
