"""GGUF architectures: llama.cpp's ``general.architecture`` as a transformers ``model_type``, its metadata as
that type's config entries, and its tensors under transformers' names with llama.cpp's conversion undone.

GGUF tensor names come from the ``gguf`` package's own table (``TENSOR_NAMES``); the transformers names
are those the architecture maps read. What llama.cpp's ``convert_hf_to_gguf`` changes, undone here:

- Llama-family rotary (``llama``, ``mistral3``, ``granite``, ``granitemoe``, ``olmo``, ``smollm3``): q/k
  rows permuted within each head from transformers' half-split rotary order to interleaved pairs; the
  permutation is inverted;
- Gemma 3 and EmbeddingGemma: q/k RMSNorm gains stored as 1 + w; w = stored − 1 in float64 (exact for
  gains of ordinary size, so the map's 1 + w gives back the stored gain);
- StableLM: the per-head q/k LayerNorms stacked into one (H, d_h) tensor; split back per head;
- Falcon, GPT-NeoX, BLOOM: the fused qkv rows regrouped from transformers' kv groups (one per head for
  GPT-NeoX and BLOOM) to [all q | all k | all v]; regrouped back;
- DeepSeek-V2/V3 (MLA): ``kv_b_proj`` split into ``attn_k_b`` (transposed per head) and ``attn_v_b`` by
  newer converters, with ``head_count_kv`` = 1 and ``key_length`` the latent's; joined back, the head
  sizes read from ``key_length_mla`` / ``value_length_mla``.

Everything else (Qwen, Gemma 1/2, Phi-3's fused qkv, PhiMoE, OLMo2, OLMoE, Command-R, Cohere2,
StarCoder2, Nemotron, EXAONE 4, BERT, Phi-2, GLM-4, GLM-4.5, gpt-oss) is stored as transformers holds it (Nemotron's +1 is on norms
outside q·k).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

import torch
from gguf import MODEL_TENSOR as T
from gguf import TENSOR_NAMES, ExpertGatingFuncType

from ..errors import InputError

Metadata = Mapping[str, object]
Build = Callable[[list[torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class Recipe:
    """One transformers tensor: the GGUF tensors it is made of, and how."""

    sources: tuple[str, ...]
    build: Build = lambda tensors: tensors[0]


@dataclass(frozen=True)
class GGUFArchitecture:
    """How one GGUF architecture reads as a transformers model_type."""

    model_type: str
    layer_tensors: Mapping[str, T]
    """Per-layer transformers module name (under ``layer_prefix``) → GGUF tensor kind."""
    layer_prefix: str = "model.layers.{i}."
    """Where layer i's modules are in the transformers checkpoint."""
    regrouped: bool = False
    """Fused qkv rows regrouped by llama.cpp from transformers' kv groups [q heads of g | k_g | v_g] (one
    head per group for GPT-NeoX and BLOOM) to [all q | all k | all v]."""
    permuted: bool = False
    """q/k rows permuted by llama.cpp for its interleaved rotary (``LlamaModel.permute``)."""
    norm_shift: float = 0.0
    """Stored q/k norm gain = transformers weight + ``norm_shift``."""
    settings: Callable[[str, Metadata, Collection[str]], dict] = field(default=lambda arch, meta, names: {})
    """Config entries beyond the head counts and sizes: (arch, metadata, GGUF tensor names) → entries."""
    key_length_is_head_dim: bool = True
    """False for MLA, whose ``key_length`` is the latent's (or d_nope + d_rope), and for Falcon, whose
    config derives its head width."""
    choose_type: Callable[[Metadata, Collection[str]], str] | None = None
    """Where one GGUF architecture stands for several model_types: which one this file is."""

    def model_type_of(self, meta: Metadata, names: Collection[str]) -> str:
        return self.choose_type(meta, names) if self.choose_type else self.model_type


QK = {"self_attn.q_proj": T.ATTN_Q, "self_attn.k_proj": T.ATTN_K}
QK_NORM = QK | {"self_attn.q_norm": T.ATTN_Q_NORM, "self_attn.k_norm": T.ATTN_K_NORM}
MLA = {
    "self_attn.q_proj": T.ATTN_Q,
    "self_attn.q_a_proj": T.ATTN_Q_A,
    "self_attn.q_a_layernorm": T.ATTN_Q_A_NORM,
    "self_attn.q_b_proj": T.ATTN_Q_B,
    "self_attn.kv_a_proj_with_mqa": T.ATTN_KV_A_MQA,
    "self_attn.kv_a_layernorm": T.ATTN_KV_A_NORM,
    "self_attn.kv_b_proj": T.ATTN_KV_B,
}


def gguf_name(kind: T, layer: int, suffix: str = "weight") -> str:
    """The GGUF name of layer ``layer``'s tensor of ``kind`` (the ``gguf`` package's table)."""
    return f"{TENSOR_NAMES[kind].format(bid=layer)}.{suffix}"


def _int(meta: Metadata, key: str) -> int | None:
    """A positive integer entry (one per layer, all equal, counts as one), None if absent; else an error."""
    value = meta.get(key)
    if isinstance(value, tuple) and len(set(value)) == 1:
        value = value[0]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"GGUF {key} = {value!r} is not a non-negative integer; the file is corrupted")
    return value


def _number(meta: Metadata, key: str) -> float | None:
    """A numeric entry, None if absent; else an error."""
    value = meta.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise InputError(f"GGUF {key} = {value!r} is not a number; the file is corrupted")
    return value


def _present(names: Collection[str], kind: T) -> bool:
    return gguf_name(kind, 0) in names


def _window(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """``sliding_window`` as the file states it (None where it states none: no default window)."""
    return {"sliding_window": _int(meta, f"{arch}.attention.sliding_window") or None}


def _phimoe(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """PhiMoE's window, and its q/k biases where the file holds them (the config's default has none)."""
    return _window(arch, meta, names) | {"attention_bias": _bias(names)}


def _layer_types(default_pattern: int) -> Callable[[str, Metadata, Collection[str]], dict]:
    """``sliding_window`` and which layers are local: ``sliding_window_pattern`` as one flag per layer, or
    n (each n-th layer global; ``default_pattern`` where the file states none, as llama.cpp assumes)."""

    def settings(arch: str, meta: Metadata, names: Collection[str]) -> dict:
        pattern = meta.get(f"{arch}.attention.sliding_window_pattern", default_pattern)
        layers = _int(meta, f"{arch}.block_count")
        window = _window(arch, meta, names)
        if not isinstance(layers, int):
            return window
        if isinstance(pattern, tuple) and len(pattern) == layers:
            local = [bool(flag) for flag in pattern]
        elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
            local = [bool((i + 1) % pattern) for i in range(layers)]
        else:
            return window
        return window | {"layer_types": ["sliding_attention" if x else "full_attention" for x in local]}

    return settings


def _gemma2(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    softcap = {"attn_logit_softcapping": _number(meta, f"{arch}.attn_logit_softcapping") or None}
    return _layer_types(2)(arch, meta, names) | softcap


def _embedding_gemma(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """EmbeddingGemma: Gemma 3 without the causal mask."""
    return _layer_types(6)(arch, meta, names) | {"use_bidirectional_attention": True}


def _exaone4(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """EXAONE 4: without a window every layer is global; with one, the file's pattern (llama.cpp writes it)."""
    layers = _int(meta, f"{arch}.block_count")
    if _int(meta, f"{arch}.attention.sliding_window") or layers is None:
        return _layer_types(4)(arch, meta, names)
    return {"sliding_window": None, "layer_types": ["full_attention"] * layers}


def _olmo(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    return {"clip_qkv": _number(meta, f"{arch}.attention.clamp_kqv")}


def _granite(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    scale = _number(meta, f"{arch}.attention.scale")
    return {} if scale is None else {"attention_multiplier": scale}


def _cohere(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    return {"use_qk_norm": _present(names, T.ATTN_Q_NORM)}


def _starcoder2(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    return _window(arch, meta, names) | {"use_bias": gguf_name(T.ATTN_Q, 0, "bias") in names}


def _stablelm(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    return {
        "qk_layernorm": _present(names, T.ATTN_Q_NORM),
        "use_qkv_bias": gguf_name(T.ATTN_Q, 0, "bias") in names,
    }


def _mla(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """MLA sizes; newer files state the per-head sizes as ``*_length_mla`` (the plain ones are the latent's)."""
    rope = _int(meta, f"{arch}.rope.dimension_count")
    qk = _int(meta, f"{arch}.attention.key_length_mla") or _int(meta, f"{arch}.attention.key_length")
    v = _int(meta, f"{arch}.attention.value_length_mla") or _int(meta, f"{arch}.attention.value_length")
    settings = {
        "q_lora_rank": _int(meta, f"{arch}.attention.q_lora_rank") or None,
        "kv_lora_rank": _int(meta, f"{arch}.attention.kv_lora_rank") or None,
        "qk_rope_head_dim": rope or None,
        "qk_nope_head_dim": qk - rope if qk and rope and qk > rope else None,
        "v_head_dim": v or None,
        "num_key_value_heads": _int(meta, f"{arch}.attention.head_count"),  # MLA: one kv per query head
    }
    missing = [key for key, value in settings.items() if value is None and key != "q_lora_rank"]
    if missing:
        raise InputError(
            f"GGUF {arch} metadata lacks {', '.join(missing)}; re-convert the model with llama.cpp"
        )
    return settings


def _falcon(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """Falcon's layout from its kv heads: one (Falcon-7B: multi-query), or groups (40B/180B: new layout)."""
    kv_heads = _int(meta, f"{arch}.attention.head_count_kv") or _int(meta, f"{arch}.attention.head_count")
    if not kv_heads:
        return {}
    return {
        "num_kv_heads": kv_heads,
        "multi_query": kv_heads == 1,
        "new_decoder_architecture": kv_heads > 1,
        "bias": gguf_name(T.ATTN_QKV, 0, "bias") in names,
        "alibi": False,
    }


def _neox(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    return {"attention_bias": gguf_name(T.ATTN_QKV, 0, "bias") in names}


def _bias(names: Collection[str]) -> bool:
    return gguf_name(T.ATTN_Q, 0, "bias") in names


def _glm4(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """GLM-4; GLM-4V's text model (M-RoPE) is stored in the same architecture with its rotary dims
    reordered, which is not undone: refused."""
    if f"{arch}.rope.dimension_sections" in meta:
        raise InputError(
            f"GGUF {arch} with M-RoPE (GLM-4V) is not supported; score its transformers checkpoint"
        )
    return {"attention_bias": _bias(names)}


def _glm4_moe(arch: str, meta: Metadata, names: Collection[str]) -> dict:
    """GLM-4.5+: ``block_count`` counts the multi-token-prediction layers after the model's own."""
    nextn = _int(meta, f"{arch}.nextn_predict_layers") or 0
    layers = _int(meta, f"{arch}.block_count")
    settings = {"num_nextn_predict_layers": nextn, "use_qk_norm": _present(names, T.ATTN_Q_NORM)}
    settings |= {"attention_bias": _bias(names)}
    return settings | ({"num_hidden_layers": layers - nextn} if layers and layers > nextn else {})


def mla_model_type(meta: Metadata, names: Collection[str]) -> str:
    """DeepSeek-V3 (and Kimi K2) route experts by sigmoid with a score-correction bias; V2 by softmax."""
    sigmoid = meta.get("deepseek2.expert_gating_func") == ExpertGatingFuncType.SIGMOID.value
    return "deepseek_v3" if sigmoid or any(".exp_probs_b." in name for name in names) else "deepseek_v2"


ARCHITECTURES: dict[str, GGUFArchitecture] = {
    "llama": GGUFArchitecture("llama", QK, permuted=True),
    "qwen2": GGUFArchitecture("qwen2", QK),
    "qwen3": GGUFArchitecture("qwen3", QK_NORM),
    "qwen3moe": GGUFArchitecture("qwen3_moe", QK_NORM),
    "qwen2moe": GGUFArchitecture("qwen2_moe", QK),
    "gemma3": GGUFArchitecture("gemma3_text", QK_NORM, norm_shift=1.0, settings=_layer_types(6)),
    "gemma2": GGUFArchitecture("gemma2", QK, settings=_gemma2),
    "gemma": GGUFArchitecture("gemma", QK),
    "phi3": GGUFArchitecture("phi3", {"self_attn.qkv_proj": T.ATTN_QKV}, settings=_window),
    "deepseek2": GGUFArchitecture(
        "deepseek_v3", MLA, settings=_mla, key_length_is_head_dim=False, choose_type=mla_model_type
    ),
    "gpt-oss": GGUFArchitecture("gpt_oss", QK, settings=_layer_types(2)),
    "mistral3": GGUFArchitecture("ministral3", QK, permuted=True),
    "command-r": GGUFArchitecture("cohere", QK_NORM, settings=_cohere),
    "cohere2": GGUFArchitecture("cohere2", QK, settings=_layer_types(4)),
    "olmo2": GGUFArchitecture("olmo2", QK_NORM),
    "olmo": GGUFArchitecture("olmo", QK, permuted=True, settings=_olmo),
    "granite": GGUFArchitecture("granite", QK, permuted=True, settings=_granite),
    "starcoder2": GGUFArchitecture("starcoder2", QK, settings=_starcoder2),
    "stablelm": GGUFArchitecture("stablelm", QK_NORM, settings=_stablelm),
    "exaone4": GGUFArchitecture("exaone4", QK_NORM, settings=_exaone4),
    "olmoe": GGUFArchitecture("olmoe", QK_NORM, settings=_olmo),
    "phimoe": GGUFArchitecture("phimoe", QK, settings=_phimoe),
    "granitemoe": GGUFArchitecture("granitemoe", QK, permuted=True, settings=_granite),
    "smollm3": GGUFArchitecture("smollm3", QK, permuted=True),
    "nemotron": GGUFArchitecture("nemotron", QK),
    "falcon": GGUFArchitecture(
        "falcon",
        {"self_attention.query_key_value": T.ATTN_QKV},
        layer_prefix="transformer.h.{i}.",
        regrouped=True,
        settings=_falcon,
        key_length_is_head_dim=False,
    ),
    "bert": GGUFArchitecture(
        "bert", {"attention.self.query": T.ATTN_Q, "attention.self.key": T.ATTN_K}, "encoder.layer.{i}."
    ),
    "phi2": GGUFArchitecture("phi", QK),
    "gptneox": GGUFArchitecture(
        "gpt_neox",
        {"attention.query_key_value": T.ATTN_QKV},
        "gpt_neox.layers.{i}.",
        regrouped=True,
        settings=_neox,
    ),
    "bloom": GGUFArchitecture(
        "bloom", {"self_attention.query_key_value": T.ATTN_QKV}, "transformer.h.{i}.", regrouped=True
    ),
    "glm4": GGUFArchitecture("glm4", QK, settings=_glm4),
    "glm4moe": GGUFArchitecture("glm4_moe", QK_NORM, settings=_glm4_moe),
    "gemma-embedding": GGUFArchitecture("gemma3_text", QK_NORM, norm_shift=1.0, settings=_embedding_gemma),
}
"""Most used first."""
SHOWN = 10
"""How many of them an error names."""


def architecture(arch: object, where: str) -> GGUFArchitecture:
    """The map of GGUF architecture ``arch``, or a one-line error naming it and the supported ones."""
    if not isinstance(arch, str) or arch not in ARCHITECTURES:
        shown = list(ARCHITECTURES)[:SHOWN]
        more = f" and {len(ARCHITECTURES) - SHOWN} more (README, 'Scoring one model')"
        raise InputError(
            f"{where}: GGUF architecture {arch!r} is not supported; supported: {', '.join(shown)}{more}"
        )
    return ARCHITECTURES[arch]


def unpermute(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Inverse of llama.cpp's q/k row permutation: per head, interleaved pairs back to two halves. A head
    count that does not split the rows into pairs (a corrupted file's) is a ValueError, which the source
    turns into its one-line error."""
    rows = weight.shape[0]
    if heads <= 0 or rows % (2 * heads):
        raise ValueError(f"{rows} rows do not split into {heads} heads of row pairs")
    return (
        weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _unshift(shift: float) -> Build:
    return lambda tensors: tensors[0].double() - shift


def _head_row(head: int) -> Build:
    return lambda tensors: tensors[0][head]


def _kv_groups(heads: int, kv_heads: int) -> Build:
    """Fused rows from llama.cpp's [q of all heads | k | v] back to transformers' kv groups, each [its
    query heads | its k | its v] (one group per head: GPT-NeoX, BLOOM, classic Falcon)."""

    def build(tensors: list[torch.Tensor]) -> torch.Tensor:
        fused = tensors[0]
        if fused.shape[0] % (heads + 2 * kv_heads) or heads % kv_heads:
            raise ValueError(f"{fused.shape[0]} rows do not split into {heads} q, {kv_heads} k and v heads")
        head_dim = fused.shape[0] // (heads + 2 * kv_heads)
        q, k, v = fused.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim])
        rest = fused.shape[1:]
        parts = [
            q.reshape(kv_heads, -1, *rest),
            k.reshape(kv_heads, -1, *rest),
            v.reshape(kv_heads, -1, *rest),
        ]
        return torch.cat(parts, dim=1).reshape(fused.shape)

    return build


def _joined_kv_b(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``kv_b_proj`` (H·(d_nope + d_v), r) from ``attn_k_b`` (H, r, d_nope) and ``attn_v_b`` (H, d_v, r)."""
    k_b, v_b = tensors
    joined = torch.cat([k_b.transpose(1, 2), v_b], dim=1)
    return joined.reshape(-1, joined.shape[-1])


def recipes(
    spec: GGUFArchitecture, names: Collection[str], n_layers: int, heads: int, kv_heads: int
) -> dict[str, Recipe]:
    """Transformers name → how to make it from the GGUF tensors ``names``, for every tensor the file has."""
    out: dict[str, Recipe] = {}
    for i in range(n_layers):
        prefix = spec.layer_prefix.format(i=i)
        for module, kind in spec.layer_tensors.items():
            for suffix in ("weight", "bias"):
                source = gguf_name(kind, i, suffix)
                if source not in names:
                    continue
                recipe = Recipe((source,))
                if spec.permuted and kind in (T.ATTN_Q, T.ATTN_K):
                    n = heads if kind == T.ATTN_Q else kv_heads
                    recipe = Recipe((source,), lambda t, n=n: unpermute(t[0], n))
                elif spec.regrouped:  # Falcon's groups are its kv heads; GPT-NeoX's and BLOOM's, its heads
                    groups = kv_heads if spec.model_type == "falcon" else heads
                    recipe = Recipe((source,), _kv_groups(heads, groups))
                elif spec.norm_shift and kind in (T.ATTN_Q_NORM, T.ATTN_K_NORM):
                    recipe = Recipe((source,), _unshift(spec.norm_shift))
                elif spec.model_type == "stablelm" and kind in (T.ATTN_Q_NORM, T.ATTN_K_NORM):
                    stem = module.replace("_norm", "_layernorm")
                    for h in range(heads if kind == T.ATTN_Q_NORM else kv_heads):
                        out[f"{prefix}{stem}.norms.{h}.{suffix}"] = Recipe((source,), _head_row(h))
                    continue
                out[f"{prefix}{module}.{suffix}"] = recipe
        k_b, v_b = gguf_name(T.ATTN_K_B, i), gguf_name(T.ATTN_V_B, i)
        if spec.layer_tensors is MLA and k_b in names and v_b in names:
            out.setdefault(f"{prefix}self_attn.kv_b_proj.weight", Recipe((k_b, v_b), _joined_kv_b))
    return out
