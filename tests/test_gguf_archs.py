"""GGUF architectures beyond llama/qwen2: each a tiny random transformers model saved as safetensors and
written again as GGUF the way llama.cpp's converter lays it out (its tensor names from the ``gguf``
package's ``TensorNameMap``, its q/k permutation, Gemma 3's +1 norms, StableLM's stacked norms, the
regrouped fused qkv of Falcon, GPT-NeoX and BLOOM, MLA's k_b/v_b split), then both read and scored by
attngeom: the tensors and the records must agree. Types attngeom has no map for yet (gpt_oss,
ministral3, glm4_moe) are checked to the tensors; their scoring is an expected failure until a map exists.

Tolerance: both files hold the same numbers (F32 throughout; the F16 and Q8_0 cases save the safetensors
model with the values the GGUF holds), so tensors agree to float rounding of the undone steps (Gemma 3's
1 + w) and the records to 1e-10 relative.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gguf
import numpy as np
import pandas as pd
import pytest
import torch
from hubserver import HubServer, pointed_at
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

import attngeom
from attngeom.cli import main
from attngeom.errors import InputError
from attngeom.sources import open_source
from attngeom.sources.gguf_archs import ARCHITECTURES, gguf_name, unpermute

ARCH = {name: enum for enum, name in gguf.MODEL_ARCH_NAMES.items()}
PERMUTED = {"llama", "mistral3", "granite", "granitemoe", "olmo", "smollm3"}
"""Architectures whose q/k rows llama.cpp permutes for its rotary (LlamaModel and its subclasses)."""
SMALL = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2)
SMALL |= dict(intermediate_size=64, vocab_size=64, head_dim=8)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
MLA = dict(num_key_value_heads=4, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8)
MLA |= dict(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, n_group=1, topk_group=1)
MLA |= dict(first_k_dense_replace=1, n_shared_experts=1)
LOCAL_GLOBAL = ["sliding_attention", "full_attention"] * 2
NO_KV_GROUPS = ("bert", "gptneox", "bloom")
IDENTITY = ("model_id", "file_hash", "revision", "n_params", "source_dtype")
"""Record columns that name the file rather than the weights (n_params: the GGUF holds attention only)."""


@dataclass(frozen=True)
class Case:
    arch: str
    model_type: str
    sizes: dict = field(default_factory=dict)
    dtype: str = "F32"  # F32 | F16 | Q8_0 (q/k only)
    split_kv_b: bool = True  # MLA: newer converters' attn_k_b / attn_v_b, else attn_kv_b
    kv_per_layer: bool = False  # head_count_kv written as one entry per layer

    @property
    def config_sizes(self) -> dict:
        """The tiny sizes (Falcon's config derives head_dim and names its kv heads num_kv_heads; BERT,
        GPT-NeoX and BLOOM have one kv head per head)."""
        drop = ("head_dim", "num_key_value_heads") if self.arch == "falcon" else ()
        drop += ("num_key_value_heads",) if self.arch in NO_KV_GROUPS else ()
        return {k: v for k, v in (SMALL | self.sizes).items() if k not in drop}


CASES = {
    "llama": Case("llama", "llama"),
    "qwen3": Case("qwen3", "qwen3"),
    "qwen3moe": Case("qwen3moe", "qwen3_moe", MOE),
    "qwen2moe": Case("qwen2moe", "qwen2_moe", MOE | dict(shared_expert_intermediate_size=16)),
    "gemma3": Case("gemma3", "gemma3_text", dict(layer_types=["sliding_attention", "full_attention"])),
    "gemma2": Case("gemma2", "gemma2"),
    "gemma": Case("gemma", "gemma"),
    "phi3": Case("phi3", "phi3", dict(sliding_window=16, pad_token_id=0)),
    "deepseek_v3": Case("deepseek2", "deepseek_v3", MLA | dict(q_lora_rank=16, scoring_func="sigmoid")),
    "deepseek_v2_lite_old": Case(
        "deepseek2", "deepseek_v2", MLA | dict(q_lora_rank=None, topk_method="greedy"), split_kv_b=False
    ),
    "command-r": Case("command-r", "cohere", dict(use_qk_norm=True)),
    "cohere2": Case("cohere2", "cohere2", dict(num_hidden_layers=4, sliding_window=16)),
    "olmo2": Case("olmo2", "olmo2"),
    "olmo": Case("olmo", "olmo", dict(clip_qkv=8.0)),
    "granite": Case("granite", "granite", dict(attention_multiplier=0.25)),
    "starcoder2": Case("starcoder2", "starcoder2"),
    "stablelm": Case("stablelm", "stablelm", dict(qk_layernorm=True, use_qkv_bias=True)),
    "mistral3": Case("mistral3", "ministral3"),
    "gpt-oss": Case("gpt-oss", "gpt_oss", dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=8)),
    "exaone4": Case(
        "exaone4", "exaone4", dict(num_hidden_layers=4, sliding_window=16, layer_types=LOCAL_GLOBAL)
    ),
    "exaone4_global": Case(
        "exaone4", "exaone4", dict(sliding_window=None, layer_types=["full_attention"] * 2)
    ),
    "olmoe": Case("olmoe", "olmoe", MOE | dict(clip_qkv=4.0)),
    "phimoe": Case("phimoe", "phimoe", dict(num_local_experts=4, attention_bias=True, sliding_window=16)),
    "granitemoe": Case("granitemoe", "granitemoe", dict(num_local_experts=4, attention_multiplier=0.5)),
    "smollm3": Case("smollm3", "smollm3", dict(num_hidden_layers=4, pad_token_id=0)),
    "nemotron": Case("nemotron", "nemotron"),
    "gemma-embedding": Case("gemma-embedding", "gemma3_text", dict(use_bidirectional_attention=True)),
    "falcon_40b": Case("falcon", "falcon", dict(new_decoder_architecture=True, num_kv_heads=2)),
    "falcon_7b": Case("falcon", "falcon", dict(multi_query=True, new_decoder_architecture=False, bias=True)),
    "bert": Case("bert", "bert"),
    "phi2": Case("phi2", "phi"),
    "gptneox": Case("gptneox", "gpt_neox"),
    "bloom": Case("bloom", "bloom"),
    "glm4": Case("glm4", "glm4", dict(pad_token_id=0)),
    "glm4moe": Case("glm4moe", "glm4_moe", dict(n_routed_experts=4, num_experts_per_tok=2, use_qk_norm=True)),
    "qwen3_f16": Case("qwen3", "qwen3", dtype="F16"),
    "llama_q8_0": Case("llama", "llama", dtype="Q8_0"),
    "qwen2_kv_per_layer": Case("qwen2", "qwen2", kv_per_layer=True),
}
SCORED = list(CASES)


def _q8_0(array: np.ndarray) -> np.ndarray:
    return gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)


def _llama_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: within each head, the two rotary halves interleaved pair by pair."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def _model(case: Case, folder):
    """The tiny random model, its norms' gains random too (they enter the folded forms), saved."""
    torch.manual_seed(0)
    config = AutoConfig.for_model(case.model_type, **case.config_sizes)
    model = (AutoModel if case.arch == "bert" else AutoModelForCausalLM).from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(0.5 * torch.randn_like(param))
            if case.dtype == "Q8_0" and name.endswith(("q_proj.weight", "k_proj.weight")):
                quantised = _q8_0(param.numpy())
                param.copy_(
                    torch.from_numpy(gguf.quants.dequantize(quantised, gguf.GGMLQuantizationType.Q8_0))
                )
    if case.dtype == "F16":
        model = model.half()
    model.save_pretrained(folder)
    return config, {k: v.detach().float().numpy() for k, v in model.state_dict().items()}


def _falcon_kv_heads(config) -> int:
    if config.new_decoder_architecture:
        return config.num_kv_heads
    return 1 if config.multi_query else config.num_attention_heads


def _metadata(writer: gguf.GGUFWriter, case: Case, config) -> None:
    """What llama.cpp's converter writes for this architecture (the entries attngeom may read)."""
    heads, layers = config.num_attention_heads, config.num_hidden_layers
    nextn = getattr(config, "num_nextn_predict_layers", 0) if case.arch == "glm4moe" else 0
    writer.add_block_count(layers + nextn)  # GLM-4.5: its multi-token-prediction layers follow
    if nextn:
        writer.add_nextn_predict_layers(nextn)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    if case.arch == "deepseek2":
        writer.add_rope_dimension_count(config.qk_rope_head_dim)
        writer.add_kv_lora_rank(config.kv_lora_rank)
        if config.q_lora_rank:
            writer.add_q_lora_rank(config.q_lora_rank)
        qk, v = config.qk_nope_head_dim + config.qk_rope_head_dim, config.v_head_dim
        if case.split_kv_b:  # newer converters: MQA over the latent
            writer.add_head_count_kv(1)
            writer.add_key_length(config.kv_lora_rank + config.qk_rope_head_dim)
            writer.add_value_length(config.kv_lora_rank)
            writer.add_key_length_mla(qk)
            writer.add_value_length_mla(v)
        else:
            writer.add_head_count_kv(heads)
            writer.add_key_length(qk)
            writer.add_value_length(v)
        gating = {"sigmoid": gguf.ExpertGatingFuncType.SIGMOID, "softmax": gguf.ExpertGatingFuncType.SOFTMAX}
        writer.add_expert_gating_func(gating[getattr(config, "scoring_func", "softmax")])
        return
    kv_heads = (
        _falcon_kv_heads(config) if case.arch == "falcon" else getattr(config, "num_key_value_heads", heads)
    )
    writer.add_head_count_kv([kv_heads] * layers if case.kv_per_layer else kv_heads)
    if getattr(config, "head_dim", None):
        writer.add_key_length(config.head_dim)
        writer.add_value_length(config.head_dim)
    if case.arch in ("gemma2", "gemma3", "gemma-embedding", "phi3", "phimoe", "cohere2", "gpt-oss"):
        writer.add_sliding_window(config.sliding_window)
    if case.arch == "gemma2":
        writer.add_attn_logit_softcapping(config.attn_logit_softcapping)
    if case.arch == "exaone4" and config.sliding_window:
        writer.add_sliding_window(config.sliding_window)
    if case.arch == "gemma3" or (case.arch == "exaone4" and config.sliding_window):
        writer.add_sliding_window_pattern([t == "sliding_attention" for t in config.layer_types])
    if case.arch in ("olmo", "olmoe"):
        writer.add_clamp_kqv(config.clip_qkv)
    if case.arch in ("granite", "granitemoe"):
        writer.add_attention_scale(config.attention_multiplier)


def _tensors(case: Case, config, state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The attention tensors as llama.cpp's converter writes them, by the gguf package's name map."""
    names = gguf.get_tensor_name_map(ARCH[case.arch], config.num_hidden_layers)
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", heads)
    out = {}
    stacked: dict[str, list[np.ndarray]] = {}
    for name, value in state.items():
        if names.get_name(name, (".weight",)) == "token_embd.weight":
            out["token_embd.weight"] = value
        if not any(part in name for part in (".self_attn.", ".self_attention.", ".attention.")):
            continue
        if case.arch == "stablelm" and "layernorm.norms." in name:  # one (H, d_h) tensor per layer
            stacked.setdefault(name.split(".norms.")[0], []).append(value)
            continue
        if case.arch == "deepseek2" and "kv_b_proj" in name and case.split_kv_b:
            r, nope = config.kv_lora_rank, config.qk_nope_head_dim
            kv_b = value.reshape(heads, nope + config.v_head_dim, r)
            k_b, v_b = (names.get_name(name.replace("kv_b", part), (".weight",)) for part in ("k_b", "v_b"))
            out[k_b] = np.ascontiguousarray(kv_b[:, :nope].transpose(0, 2, 1))  # per head (r, d_nope)
            out[v_b] = np.ascontiguousarray(kv_b[:, nope:])
            continue
        base = names.get_name(name, (".weight", ".bias"))
        if base is None:
            continue
        if "query_key_value" in name:  # kv groups → [all q | all k | all v]
            kv = _falcon_kv_heads(config) if case.arch == "falcon" else heads
            groups = value.reshape(kv, heads // kv + 2, -1, *value.shape[1:])
            flat = [
                part.reshape(-1, *value.shape[1:]) for part in (groups[:, :-2], groups[:, -2], groups[:, -1])
            ]
            value = np.concatenate(flat)
        if case.arch in PERMUTED and ".q_proj." in name:
            value = _llama_permute(value, heads)
        if case.arch in PERMUTED and ".k_proj." in name:
            value = _llama_permute(value, kv_heads)
        if case.arch in ("gemma3", "gemma-embedding") and name.endswith("norm.weight"):
            value = value + np.float32(1)
        out[base] = value  # get_name keeps the .weight / .bias it matched
    for name, values in stacked.items():
        out[names.get_name(name, ()) + ".weight"] = np.stack(values)
    if case.arch == "glm4moe":  # a multi-token-prediction layer's q/k, which are not the model's
        layer = config.num_hidden_layers
        out[f"blk.{layer}.attn_q.weight"] = out["blk.0.attn_q.weight"]
        out[f"blk.{layer}.attn_k.weight"] = out["blk.0.attn_k.weight"]
    return out


def _write(case: Case, folder):
    config, state = _model(case, folder / "hf")
    path = folder / f"{case.arch}.gguf"
    writer = gguf.GGUFWriter(path, case.arch)
    _metadata(writer, case, config)
    for name, value in _tensors(case, config, state).items():
        if case.dtype == "Q8_0" and name.endswith(("attn_q.weight", "attn_k.weight")):
            writer.add_tensor(name, _q8_0(value), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        elif case.dtype == "F16" and value.ndim > 1:
            writer.add_tensor(name, value.astype(np.float16))
        else:  # norms stay float32, as llama.cpp keeps them
            writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return folder / "hf", path, state


@pytest.fixture(scope="module", params=list(CASES))
def written(request, tmp_path_factory):
    return CASES[request.param], *_write(CASES[request.param], tmp_path_factory.mktemp(request.param))


def test_config_and_tensors_match_the_safetensors_model(written):
    """The GGUF reads as the model_type, head counts and sizes of the model it was converted from, and
    every tensor it offers under a transformers name equals that model's tensor (conversion undone)."""
    case, _, path, state = written
    source = open_source(str(path))
    config = source.config
    assert config.model_type == case.model_type
    expected = AutoConfig.for_model(case.model_type, **case.config_sizes)
    kv = ("new_decoder_architecture",) if case.arch == "falcon" else ("num_key_value_heads",)
    kv = () if case.arch in NO_KV_GROUPS else kv
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", *kv):
        assert getattr(config, key) == getattr(expected, key), key
    assert source.names and all(name in state for name in source.names)
    q_or_kv = {n for n in source.names if any(p in n for p in ("q_proj", "kv_a_proj", "qkv_proj", "query"))}
    assert len(q_or_kv) >= config.num_hidden_layers
    for name in source.names:
        torch.testing.assert_close(
            source.get(name).double(), torch.from_numpy(state[name]).double(), rtol=1e-6, atol=1e-7, msg=name
        )


@pytest.mark.parametrize("key", SCORED)
def test_records_agree_with_the_safetensors_model(key, tmp_path):
    case = CASES[key]
    folder, path, _ = _write(case, tmp_path)
    expected = attngeom.score(str(folder), progress=False)
    got = attngeom.score(str(path), progress=False)
    assert len(got) == len(expected) > 0
    for column in expected.columns.difference(IDENTITY):
        if expected[column].dtype.kind == "f":
            np.testing.assert_allclose(got[column], expected[column], rtol=1e-10, atol=1e-12, err_msg=column)
        else:
            assert got[column].astype(str).tolist() == expected[column].astype(str).tolist(), column


@pytest.mark.parametrize("key", ["gemma3", "deepseek_v3"])
def test_a_hub_file_read_by_range_gives_the_same_records(key, tmp_path):
    """The conversion steps run on the tensors read by HTTP range as on the local file (MLA's kv_b from
    two ranged tensors)."""
    _, path, _ = _write(CASES[key], tmp_path / "files")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "m.gguf").write_bytes(path.read_bytes())
    local = attngeom.score(str(path), progress=False)
    with HubServer({"org/m": repo}).running() as server, pointed_at(server, tmp_path / "home"):
        remote = attngeom.score("org/m/m.gguf", progress=False)
    assert remote["file_hash"].iloc[0] == local["file_hash"].iloc[0]
    columns = local.columns.difference(["model_id", "revision"])
    pd.testing.assert_frame_equal(remote[columns], local[columns], check_exact=False, rtol=1e-10, atol=1e-12)


def test_the_permutation_is_undone_not_just_harmless():
    """q·k per head is blind to a row permutation shared by q and k; the tensors are not: undo is exact."""
    weight = torch.arange(4 * 8 * 3, dtype=torch.float64).reshape(32, 3)
    permuted = torch.from_numpy(_llama_permute(weight.numpy(), 4))
    assert not torch.equal(permuted, weight)
    assert torch.equal(unpermute(permuted, 4), weight)


def test_names_are_the_gguf_packages():
    """Every tensor kind of the map is one the gguf package lists for that architecture, and its
    transformers name is one llama.cpp's own name map sends to the same GGUF tensor."""
    for arch, spec in ARCHITECTURES.items():
        names = gguf.get_tensor_name_map(ARCH[arch], 1)
        for module, kind in spec.layer_tensors.items():
            assert kind in gguf.MODEL_TENSORS[ARCH[arch]], (arch, kind)
            hf_name = spec.layer_prefix.format(i=0) + module + ".weight"
            assert names.get_name(hf_name, (".weight",)) == gguf_name(kind, 0), (arch, module)


def test_unknown_architecture_is_one_line(tmp_path, capsys):
    path = _header_only(tmp_path / "m.gguf", "rwkv7", [])
    with pytest.raises(InputError, match=r"GGUF architecture 'rwkv7' is not supported; supported: llama"):
        open_source(path)
    out = tmp_path / "s.parquet"
    assert main(["score", path, "-o", str(out), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attngeom: error: ") and "rwkv7" in lines[0], lines
    assert len(lines[0]) < 400 and not out.exists()


def _header_only(path, arch: str, entries: list[tuple[str, str, object]], tensors: dict | None = None) -> str:
    """A GGUF of 2 layers, 4 heads, width 32, ``tensors`` only, and ``entries``: (GGUFWriter method, key
    after the architecture, value), so an entry can have any type."""
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(2)
    writer.add_embedding_length(32)
    writer.add_head_count(4)
    for method, key, value in entries:
        getattr(writer, method)(f"{arch}.{key}", value)
    for name, value in (tensors or {}).items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return str(path)


@pytest.mark.parametrize(
    ("arch", "entry", "message"),
    [
        ("llama", ("add_array", "attention.head_count_kv", [2, 1]), "head_count_kv differs per layer"),
        ("deepseek2", ("add_uint32", "rope.dimension_count", 4), "lacks kv_lora_rank, qk_nope_head_dim"),
        ("gemma2", ("add_int32", "attention.sliding_window", -1), "sliding_window = -1 is not a non-neg"),
        ("olmo", ("add_string", "attention.clamp_kqv", "8"), "clamp_kqv = '8' is not a number"),
        ("glm4", ("add_array", "rope.dimension_sections", [2, 1, 1, 0]), "glm4 with M-RoPE .* not supported"),
    ],
    ids=["kv heads per layer differ", "MLA sizes missing", "negative window", "clamp not a number", "GLM-4V"],
)
def test_bad_metadata_is_one_error_naming_the_entry(tmp_path, arch, entry, message):
    path = _header_only(tmp_path / "m.gguf", arch, [entry])
    with pytest.raises(InputError, match=message) as err:
        open_source(path)
    assert "\n" not in str(err.value) and path in str(err.value)


def test_a_tensor_of_the_wrong_shape_is_one_line(tmp_path):
    """A fused qkv whose rows do not split into the heads the metadata states: an error, not a traceback."""
    qkv = {f"blk.{i}.attn_qkv.weight": np.zeros((90, 32), dtype=np.float32) for i in range(2)}
    path = _header_only(tmp_path / "m.gguf", "gptneox", [], qkv)
    with pytest.raises(InputError, match=r"blk.0.attn_qkv.weight \(90, 32\) cannot make .* gpt_neox") as err:
        attngeom.score(path, progress=False)
    assert "\n" not in str(err.value)
