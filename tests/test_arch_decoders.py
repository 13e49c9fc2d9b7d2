"""Conformance of the rotary decoder families (decoders.py) against their own forward pass, and GGUF copies.

Standard forms must reproduce the captured per-head q·k exactly. The q/k-normalised forms (OLMo2,
Qwen3, Phi qk_layernorm) claim q·k up to positive per-token(-and-head) scalars: checked per token,
vector by vector, after removing LayerNorm's additive bias.
"""

import json

import gguf
import numpy as np
import pytest
import torch
from conformance import (
    assert_conforms,
    assert_conforms_up_to_scale,
    build,
    capture_qk,
    layers_from_disk,
    tiny_config,
    token_inputs,
)

import attngeom
from attngeom.architectures import architecture_for
from attngeom.architectures.tables.decoders import llama_layers
from attngeom.errors import InputError
from attngeom.sources import open_source

SMALL = {"num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 100, "pad_token_id": 0}

CONFIGS = {
    "llama_mha": ("llama", {"hidden_size": 32, "num_attention_heads": 4}),
    "llama_gqa": ("llama", {"hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 2}),
    "llama_bias": ("llama", {"hidden_size": 32, "num_attention_heads": 4, "attention_bias": True}),
    "mistral": ("mistral", {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}),
    "mixtral": (
        "mixtral",
        {
            "hidden_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_local_experts": 2,
            "num_experts_per_tok": 1,
        },
    ),
    "qwen2": ("qwen2", {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}),
    "gemma": (
        "gemma",
        {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 12},
    ),
    "gemma2": (
        "gemma2",
        {
            "hidden_size": 32,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 12,
            "query_pre_attn_scalar": 20,
            "attn_logit_softcapping": 30.0,
        },
    ),
    "phi": ("phi", {"hidden_size": 32, "num_attention_heads": 4, "partial_rotary_factor": 0.5}),
    "phi3": ("phi3", {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}),
    "olmo": ("olmo", {"hidden_size": 32, "num_attention_heads": 4, "attention_bias": True}),
    "olmo_clip": ("olmo", {"hidden_size": 32, "num_attention_heads": 4, "clip_qkv": 1e6}),
    "qwen3": (
        "qwen3",
        {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12},
    ),
    "olmo2": ("olmo2", {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2}),
    "phi_qk_layernorm": (
        "phi",
        {"hidden_size": 32, "num_attention_heads": 4, "partial_rotary_factor": 0.5, "qk_layernorm": True},
    ),
}
STANDARD = [
    "llama_mha",
    "llama_gqa",
    "llama_bias",
    "mistral",
    "mixtral",
    "qwen2",
    "gemma",
    "gemma2",
    "phi",
    "phi3",
    "olmo",
    "olmo_clip",
]
NORMALISED = {"qwen3": False, "olmo2": True, "phi_qk_layernorm": False}
"""q/k-normalised families → whether the per-token scalar is shared by all heads of a layer."""


def make(name: str, seed: int = 0) -> torch.nn.Module:
    model_type, sizes = CONFIGS[name]
    model = build(tiny_config(model_type, **SMALL, **sizes), seed=seed)
    if model_type == "mixtral":
        model.set_experts_implementation("eager")  # the grouped-mm experts take no float64
    return model


def capture(model: torch.nn.Module):
    """``capture_qk``; Gemma2's soft-capping (applied to q·k after it is formed) is switched off, as the
    capturing SDPA function cannot apply it; the captured q and k do not depend on it."""
    for module in model.modules():
        if hasattr(module, "attn_logit_softcapping"):
            module.attn_logit_softcapping = None
    return capture_qk(model, token_inputs(model.config))


@pytest.mark.parametrize("name", STANDARD)
def test_standard_forms_conform_from_disk(name, tmp_path):
    model = make(name)
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.form == "standard" for layer in layers)
    assert_conforms(capture(model), layers)


def _layernorm_shifts(model: torch.nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    attentions = [m for m in model.modules() if type(m).__name__ == "PhiAttention"]
    return [(a.q_layernorm.bias.double(), a.k_layernorm.bias.double()) for a in attentions]


@pytest.mark.parametrize("name", sorted(NORMALISED))
def test_normalised_forms_conform_up_to_scalars(name, tmp_path):
    model = make(name)
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.form.startswith(("qk_norm", "qk_layernorm")) for layer in layers)
    layernorm = name == "phi_qk_layernorm"
    assert all(("qk_norm_bias" in layer.left_out) == layernorm for layer in layers)
    captures = capture_qk(model, token_inputs(model.config))
    shifts = _layernorm_shifts(model) if layernorm else None
    assert_conforms_up_to_scale(captures, layers, NORMALISED[name], shifts)


@pytest.mark.parametrize("name", sorted(NORMALISED))
def test_normalised_forms_need_the_folded_gains(name, tmp_path):
    """Without the norm gains (the plain Llama map), the captured q is not a rescaling: the check can fail."""
    model = make(name)
    model.save_pretrained(tmp_path)
    source = open_source(tmp_path)
    plain = list(llama_layers(source.config, source))
    captures = capture_qk(model, token_inputs(model.config))
    shifts = _layernorm_shifts(model) if name == "phi_qk_layernorm" else None
    with pytest.raises(AssertionError):
        assert_conforms_up_to_scale(captures, plain, NORMALISED[name], shifts)


def test_left_out_names_what_the_form_excludes(tmp_path):
    expected = {
        "llama_mha": "rotary,scale",
        "llama_bias": "bias,rotary,scale",
        "qwen2": "bias,rotary,scale",
        "phi": "bias,rotary,scale",
        "gemma2": [  # layer_types: local (sliding-window) layers alternate with global ones; the
            # query_pre_attn_scalar is a scale, the soft cap seen in the forward pass
            "rotary,scale,sliding_window,attn_logit_softcapping",
            "rotary,scale,attn_logit_softcapping",
        ],
        "olmo": "bias,rotary,scale",
        "olmo_clip": "rotary,scale",  # a clamp its type's default config does not set: not stated
        "phi_qk_layernorm": "bias,rotary,scale,qk_norm_bias",
    }
    for name, left_out in expected.items():
        layers = layers_from_disk(make(name), tmp_path / name)
        per_layer = left_out if isinstance(left_out, list) else [left_out] * len(layers)
        assert [",".join(layer.left_out) for layer in layers] == per_layer, name


@pytest.mark.parametrize("name", list(CONFIGS))
def test_engine_end_to_end_on_disk_and_in_memory(name, tmp_path):
    model = make(name)
    model.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    config = model.config
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None)
    kv_heads = kv_heads or heads
    assert len(on_disk) == 2 * (heads + 1)
    assert set(on_disk["model_type"]) == {config.model_type}
    assert set(on_disk["n_kv_heads"]) == {kv_heads}
    head_rows = on_disk[on_disk["head"].notna()]
    assert list(head_rows["kv_head"][:heads]) == [h // (heads // kv_heads) for h in range(heads)]
    expected_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    assert set(on_disk["head_dim"]) == {expected_dim}
    assert (on_disk["form"] == "standard").all() == (name in STANDARD)
    for column in ("symmetry", "directionality", "norm"):
        torch.testing.assert_close(
            torch.tensor(on_disk[column].to_numpy()), torch.tensor(in_memory[column].to_numpy())
        )


# --- MobileLLM: custom model_type "mobilellm", read as Llama's layout without remote code ----------------------


def _as_mobilellm(directory) -> None:
    config_file = directory / "config.json"
    raw = json.loads(config_file.read_text())
    raw.update(
        model_type="mobilellm",
        architectures=["MobileLLMForCausalLM"],
        auto_map={
            "AutoConfig": "configuration_mobilellm.MobileLLMConfig",
            "AutoModelForCausalLM": "modeling_mobilellm.MobileLLMForCausalLM",
        },
        layer_sharing=False,
        share_embedding=True,
    )
    config_file.write_text(json.dumps(raw))


def test_mobilellm_conforms_as_llama_layout(tmp_path):
    model = make("llama_gqa")  # MobileLLM's blocks are LlamaDecoderLayer
    model.save_pretrained(tmp_path)
    _as_mobilellm(tmp_path)
    source = open_source(tmp_path)
    assert source.config.model_type == "mobilellm"
    layers = list(architecture_for(source.config).layers(source.config, source))
    assert_conforms(capture_qk(model, token_inputs(model.config)), layers)
    scores = attngeom.score(tmp_path, progress=False)
    assert set(scores["model_type"]) == {"mobilellm"}
    assert list(scores[scores["head"].notna()]["kv_head"][:6]) == [0, 0, 0, 1, 1, 1]


def test_other_remote_code_model_types_are_still_refused(tmp_path):
    make("llama_mha").save_pretrained(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.update(model_type="somethingcustom", auto_map={"AutoConfig": "configuration_x.XConfig"})
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="somethingcustom"):
        attngeom.score(tmp_path, progress=False)


# --- GGUF copies (SmolLM2 ships as a llama GGUF; Qwen2 has its own GGUF architecture) -------------------------------------------------


F32, Q8_0 = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q8_0


def _rotary_interleave(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """llama.cpp's row order for llama q/k: within each head, rows (j, j + d_h/2) become (2j, 2j + 1)."""
    rows_per_head = weight.shape[0] // heads
    order = torch.arange(rows_per_head).reshape(2, rows_per_head // 2).T.reshape(-1)
    return weight.reshape(heads, rows_per_head, -1)[:, order].reshape(weight.shape)


def write_gguf(model: torch.nn.Module, path, arch: str, qtype: gguf.GGMLQuantizationType, interleave: bool):
    """The attention tensors of ``model`` in a GGUF file as llama.cpp's converter lays them out."""
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_vocab_size(config.vocab_size)
    state = model.state_dict()
    for i in range(config.num_hidden_layers):
        for short, n in (("q", heads), ("k", kv_heads)):
            for kind in ("weight", "bias"):
                name = f"layers.{i}.self_attn.{short}_proj.{kind}"
                if name not in state:
                    continue
                tensor = state[name].float()
                if interleave and kind == "weight":
                    tensor = _rotary_interleave(tensor, n)
                data = tensor.numpy()
                if kind == "weight" and qtype != F32:
                    quantised = gguf.quants.quantize(data, qtype)
                    writer.add_tensor(f"blk.{i}.attn_{short}.{kind}", quantised, raw_dtype=qtype)
                else:
                    writer.add_tensor(f"blk.{i}.attn_{short}.{kind}", data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


EXACT = {"symmetry": 1e-6, "directionality": 1e-5, "norm": 1e-6, "weights": 1e-5}
QUANTISED = {"symmetry": 2e-3, "directionality": 0.1, "norm": 1e-3, "weights": 0.05}
"""Largest differences allowed (norm relative to the largest norm). Directionality counts rows above a
threshold, so Q8_0 noise of ~1% moves a few rows across it in a 64-dim head: measured up to 0.05."""
GGUF_CASES = {
    "llama_f32": ("llama", F32, EXACT),
    "llama_q8_0": ("llama", Q8_0, QUANTISED),
    "qwen2_f32": ("qwen2", F32, EXACT),
    "qwen2_q8_0": ("qwen2", Q8_0, QUANTISED),
}


def gguf_model(model_type: str) -> torch.nn.Module:
    """A tiny GQA model with d = 64, so q/k rows fill whole Q8_0 blocks of 32."""
    sizes = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    return build(tiny_config(model_type, **SMALL, **sizes))


@pytest.mark.parametrize("case", list(GGUF_CASES))
def test_gguf_copy_scores_like_safetensors(case, tmp_path):
    model_type, qtype, tolerances = GGUF_CASES[case]
    model = gguf_model(model_type)
    model.save_pretrained(tmp_path / "hf")
    interleave = model_type == "llama"  # llama.cpp reorders llama q/k rows for its rotary; qwen2 keeps them
    write_gguf(model, tmp_path / "tiny.gguf", model_type, qtype, interleave)
    reference = attngeom.score(tmp_path / "hf", progress=False)
    copy = attngeom.score(tmp_path / "tiny.gguf", progress=False)
    assert set(copy["model_type"]) == {model_type}
    assert list(copy["kv_head"].fillna(-1)) == list(reference["kv_head"].fillna(-1))
    assert list(copy["left_out"]) == list(reference["left_out"])
    for column in ("symmetry", "directionality", "norm"):
        ours, theirs = copy[column].to_numpy(), reference[column].to_numpy()
        scale = 1.0 if column != "norm" else np.abs(theirs).max()
        assert np.abs(ours - theirs).max() <= tolerances[column] * scale, (
            column,
            np.abs(ours - theirs).max(),
        )
    source = open_source(tmp_path / "tiny.gguf")
    w_q = source.get("layers.0.self_attn.q_proj.weight")
    stored = model.state_dict()["layers.0.self_attn.q_proj.weight"].float()
    # llama.cpp's row order for llama's rotary is undone on reading (sources/gguf_archs.py): the rows come
    # back as transformers stores them, for the reordered llama copy as for qwen2's
    assert torch.allclose(w_q, stored, atol=tolerances["weights"])


def test_permutation_within_heads_of_q_only_changes_the_scores():
    """The invariance above needs the same within-head permutation on q and k: permuting q alone fails."""
    model = gguf_model("llama")
    reference = attngeom.score(model, progress=False)
    with torch.no_grad():
        for attention in (m for m in model.modules() if type(m).__name__ == "LlamaAttention"):
            attention.q_proj.weight.copy_(_rotary_interleave(attention.q_proj.weight, 4))
    changed = attngeom.score(model, progress=False)
    assert np.abs(changed["symmetry"].to_numpy() - reference["symmetry"].to_numpy()).max() > 1e-3
