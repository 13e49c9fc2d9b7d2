"""Conformance of the decoder families added for today's models (decoders.py, normalised_decoders.py,
gpt_lineage.py): each tiny random model is saved, read back from disk, and its map must reproduce the
model's own per-head q·k (exactly, or up to per-token scalars for q/k-normalised families).

NoPE claims (``rotary`` absent from ``left_out``) are checked at real positions: there the captured q·k
of a NoPE layer still equals the form, and that of a rotary layer does not.
"""

import pytest
import torch
from conformance import (
    assert_conforms,
    assert_conforms_up_to_scale,
    build,
    capture_call_operands,
    capture_qk,
    layers_from_disk,
    tiny_config,
    token_inputs,
)
from transformers.models.mpt.modeling_mpt import MptAttention

import attngeom
from attngeom.architectures import AttentionLayer, UnscoredLayer, architecture_for
from attngeom.sources import open_source

SMALL = {"num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 100, "pad_token_id": 0}
GQA = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}
MOE = {"num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 16}
LOCAL_GLOBAL = {"sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"]}

CONFIGS = {
    "qwen2_moe": ("qwen2_moe", {**GQA, **MOE, "shared_expert_intermediate_size": 16, "qkv_bias": True}),
    "phimoe": ("phimoe", {**GQA, "num_local_experts": 2, "num_experts_per_tok": 1, "attention_bias": True}),
    "smollm3": ("smollm3", {**GQA, "no_rope_layers": [1, 0]}),
    "granite": ("granite", {**GQA, "attention_multiplier": 0.3}),
    "granitemoe": ("granitemoe", {**GQA, "attention_multiplier": 0.3, "num_local_experts": 2}),
    "cohere": ("cohere", GQA),
    "cohere2": ("cohere2", {**GQA, **LOCAL_GLOBAL}),
    "starcoder2": ("starcoder2", {**GQA, "use_bias": True, "sliding_window": 4}),
    "stablelm": ("stablelm", {**GQA, "use_qkv_bias": True}),
    "nemotron": ("nemotron", {**GQA, "head_dim": 8, "partial_rotary_factor": 0.5}),
    "glm": ("glm", {**GQA, "head_dim": 8, "attention_bias": True}),
    "glm4": ("glm4", {**GQA, "head_dim": 8, "attention_bias": True}),
    "helium": ("helium", {**GQA, "head_dim": 8}),
    "gpt_bigcode_mqa": ("gpt_bigcode", {"n_embd": 32, "n_head": 4, "n_layer": 2, "multi_query": True}),
    "gpt_bigcode_mha": ("gpt_bigcode", {"n_embd": 32, "n_head": 4, "n_layer": 2, "multi_query": False}),
    "mpt": ("mpt", {"d_model": 32, "n_heads": 4, "n_layers": 2, "attn_config": {"clip_qkv": 1e6}}),
    "dbrx": (
        "dbrx",
        {
            "d_model": 32,
            "n_heads": 4,
            "n_layers": 2,
            "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 1e6},
            "ffn_config": {"ffn_hidden_size": 16, "moe_num_experts": 2, "moe_top_k": 1},
        },
    ),
    # q/k-normalised: the form is W_q diag(g_q) (W_k diag(g_k))ᵀ up to per-token(-and-head) scalars
    "qwen3_moe": ("qwen3_moe", {**GQA, **MOE, "head_dim": 12}),
    "olmoe": ("olmoe", {**GQA, "num_experts": 2, "num_experts_per_tok": 1, "clip_qkv": 1e6}),
    "exaone4": ("exaone4", {**GQA, "sliding_window": 4, "sliding_window_pattern": 2}),
    "gemma3_text": ("gemma3_text", {**GQA, "head_dim": 12, "query_pre_attn_scalar": 20, **LOCAL_GLOBAL}),
    "cohere_qk_norm": ("cohere", {**GQA, "use_qk_norm": True}),
    "stablelm_qk_layernorm": ("stablelm", {**GQA, "qk_layernorm": True}),
    "persimmon": ("persimmon", {"hidden_size": 32, "num_attention_heads": 4, "qk_layernorm": True}),
}
NORMALISED = {
    "qwen3_moe": False,
    "olmoe": True,
    "exaone4": False,
    "gemma3_text": False,
    "cohere_qk_norm": False,
    "stablelm_qk_layernorm": False,
    "persimmon": False,
}
"""q/k-normalised cases → whether the per-token scalar is shared by all heads of a layer."""
STANDARD = [name for name in CONFIGS if name not in NORMALISED]
FLOAT32_ROTARY = {"cohere": 1e-6, "cohere2": 1e-6}
"""Cohere's rotary runs in float32 even for a float64 model: q and k carry float32 rounding."""

LEFT_OUT = {
    "qwen2_moe": ["bias,rotary,scale"] * 2,
    "phimoe": ["bias,rotary,scale"] * 2,
    "smollm3": ["rotary,scale", "scale"],
    "granite": ["rotary,scale"] * 2,  # the attention_multiplier is the scale
    "cohere2": ["rotary,scale,sliding_window", "scale"],
    "starcoder2": ["bias,rotary,scale,sliding_window"] * 2,
    "glm": ["bias,rotary,scale"] * 2,
    "gpt_bigcode_mqa": ["bias,scale,absolute_position_embeddings"] * 2,
    "mpt": ["alibi,scale,clip_qkv"] * 2,
    "dbrx": ["rotary,scale,clip_qkv"] * 2,
    "olmoe": ["rotary,scale"] * 2,  # a clamp its type's default config does not set: not stated
    "exaone4": ["rotary,scale,sliding_window", "scale"],
    "gemma3_text": ["rotary,scale,sliding_window", "rotary,scale"],
    "persimmon": ["bias,rotary,scale,qk_norm_bias"] * 2,
}


def make(name: str, seed: int = 0) -> torch.nn.Module:
    model_type, sizes = CONFIGS[name]
    model = build(tiny_config(model_type, **{**SMALL, **sizes}), seed=seed)
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")  # the grouped-mm experts take no float64
    return model


def capture(model: torch.nn.Module, positions_zero: bool = True):
    """The model's own q and k: through the attention interface, or MPT's q·kᵀ matmul."""
    inputs = token_inputs(model.config, zero_positions=positions_zero)
    if model.config.model_type == "mpt":
        inputs.pop("position_ids", None)  # ALiBi, no position ids
        return capture_call_operands(model, inputs, MptAttention, torch, "matmul", lambda q, k_t: (q, k_t.mT))
    return capture_qk(model, inputs)


def _layernorm_shifts(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
    """The additive bias of a q/k LayerNorm shared by the heads (Persimmon), per attention layer."""
    norms = [m for m in model.modules() if getattr(getattr(m, "q_layernorm", None), "bias", None) is not None]
    return [(m.q_layernorm.bias.double(), m.k_layernorm.bias.double()) for m in norms] or None


@pytest.mark.parametrize("name", STANDARD)
def test_standard_forms_conform_from_disk(name, tmp_path):
    model = make(name)
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.form == "standard" for layer in layers)
    assert_conforms(capture(model), layers, rtol=FLOAT32_ROTARY.get(CONFIGS[name][0], 1e-9))


@pytest.mark.parametrize("name", sorted(NORMALISED))
def test_normalised_forms_conform_up_to_scalars(name, tmp_path):
    model = make(name)
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.form.startswith(("qk_norm", "qk_layernorm")) for layer in layers)
    assert_conforms_up_to_scale(capture(model), layers, NORMALISED[name], _layernorm_shifts(model))


@pytest.mark.parametrize("name", ["gemma3_text", "cohere_qk_norm", "stablelm_qk_layernorm"])
def test_normalised_forms_need_their_gains(name, tmp_path):
    """With the raw projections (gains not folded), the check fails: Gemma 3's 1 + w and per-head gains matter."""
    model = make(name)
    layers = layers_from_disk(model, tmp_path)
    state = model.state_dict()
    raw = [
        AttentionLayer(
            stack=layer.stack,
            layer=layer.layer,
            w_q=state[f"layers.{layer.layer}.self_attn.q_proj.weight"].T,
            w_k=state[f"layers.{layer.layer}.self_attn.k_proj.weight"].T,
            n_heads=layer.n_heads,
            n_kv_heads=layer.n_kv_heads,
            head_dim=layer.head_dim,
        )
        for layer in layers
    ]
    with pytest.raises(AssertionError):
        assert_conforms_up_to_scale(capture(model), raw, NORMALISED[name])


@pytest.mark.parametrize("name", sorted(LEFT_OUT))
def test_left_out_names_what_the_form_excludes_per_layer(name, tmp_path):
    layers = layers_from_disk(make(name), tmp_path)
    assert [",".join(layer.left_out) for layer in layers] == LEFT_OUT[name]


@pytest.mark.parametrize("name", ["smollm3", "cohere2"])
def test_nope_layers_conform_at_real_positions(name, tmp_path):
    """A layer without ``rotary`` in left_out reproduces q·k at any position; a rotary layer does not."""
    model = make(name)
    layers = layers_from_disk(model, tmp_path)
    captures = capture(model, positions_zero=False)
    for captured, layer in zip(captures, layers, strict=True):
        rtol = FLOAT32_ROTARY.get(name, 1e-9)
        if "rotary" in layer.left_out:
            with pytest.raises(AssertionError):
                assert_conforms([captured], [layer], rtol=rtol)
        else:
            assert_conforms([captured], [layer], rtol=rtol)


def test_mpt_with_qk_layernorm_is_refused(tmp_path):
    model = make("mpt")
    model.config.attn_config.qk_ln = True
    model.save_pretrained(tmp_path)
    with pytest.raises(attngeom.errors.InputError, match="qk_ln"):
        attngeom.score(tmp_path, progress=False)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_engine_end_to_end_on_disk_and_in_memory(name, tmp_path):
    model = make(name)
    model.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    config = model.config
    assert set(on_disk["model_type"]) == {config.model_type}
    assert architecture_for(config).n_layers(config) == on_disk["layer"].nunique() == 2
    assert (on_disk["form"] == "standard").all() == (name in STANDARD)
    for column in ("symmetry", "directionality", "norm"):
        torch.testing.assert_close(
            torch.tensor(on_disk[column].to_numpy()), torch.tensor(in_memory[column].to_numpy())
        )


# --- Jamba: attention layers among Mamba blocks ---------------------------------------------------------------


def jamba() -> torch.nn.Module:
    sizes = {**GQA, "num_hidden_layers": 4, "attn_layer_period": 2, "attn_layer_offset": 1, "num_experts": 2}
    config = tiny_config("jamba", **{**SMALL, **sizes, "expert_layer_period": 2, "expert_layer_offset": 1})
    model = build(config)
    model.set_experts_implementation("eager")
    return model


def test_jamba_scores_attention_layers_and_marks_mamba_layers(tmp_path):
    model = jamba()
    model.save_pretrained(tmp_path)
    source = open_source(tmp_path)
    items = list(architecture_for(source.config).layers(source.config, source))
    assert [type(item) for item in items] == [UnscoredLayer, AttentionLayer, UnscoredLayer, AttentionLayer]
    assert [item.layer for item in items] == [0, 1, 2, 3]
    assert all("MambaMixer" in item.reason for item in items if isinstance(item, UnscoredLayer))
    assert architecture_for(source.config).n_layers(source.config) == len(items)
    attention = [item for item in items if isinstance(item, AttentionLayer)]
    assert all(layer.left_out == ("scale",) for layer in attention)  # no position encoding at all
    assert_conforms(capture(model, positions_zero=False), attention)


def test_jamba_engine_writes_not_scored_rows(tmp_path):
    model = jamba()
    model.save_pretrained(tmp_path)
    scores = attngeom.score(tmp_path, progress=False)
    assert sorted(scores["layer"].unique()) == [0, 1, 2, 3]
    assert scores[scores["layer"].isin([0, 2])]["symmetry"].isna().all()
