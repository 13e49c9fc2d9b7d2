"""A tiny config of any ``model_type``, derived from its defaults by the names of its entries.

Sizes are shrunk generically (widths to 64, 4 query heads and 2 kv heads of width 16, 2 layers, a
128-token vocabulary, 4 experts, 2 per token, images of 4×4 patches) wherever a default is larger, in
the config and each sub-config; token ids the smaller vocabulary no longer holds are renumbered;
per-layer lists keep one layer of each kind.
"""

from __future__ import annotations

import re
from typing import Any

WIDTH, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB, FFN = 64, 4, 2, 16, 2, 128, 64

RULES: tuple[tuple[str, int], ...] = (
    (
        r"^(num_key_value_heads|num_kv_heads|n_kv_heads?|multi_query_group_num|num_key_value_groups)$",
        KV_HEADS,
    ),
    (r"(^|_)(num_attention_heads|attention_heads|n_heads?|num_heads|heads)$", HEADS),
    (r"^(head_dim|attention_head_dim|d_kv|kv_channels|qk_nope_head_dim|v_head_dim|head_size)$", HEAD_DIM),
    (r"^qk_rope_head_dim$", 8),
    (r"^(q_lora_rank|kv_lora_rank)$", 32),
    (r"(^|_)(hidden_size|d_model|n_embd|embed_dim|dim|hidden_dim|embedding_size|projection_dim)$", WIDTH),
    (r"^(word_embed_proj_dim|n_positions_dim|proj_dim|output_dim|text_embed_dim|vision_embed_dim)$", WIDTH),
    (r"(^|_)(num_hidden_layers|n_layers?|num_layers|encoder_layers|decoder_layers|depth)$", LAYERS),
    (r"(^|_)(intermediate_size|ffn_dim|n_inner|d_ff|mlp_dim|ffn_hidden_size|intermediate_dim)$", FFN),
    (r"(^|_)vocab_size$", VOCAB),
    (r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_routed_experts)$", 4),
    (r"^(num_experts_per_tok|num_experts_per_token|moe_topk|moe_k|top_k|num_selected_experts)$", 2),
    (r"^(n_group|topk_group|n_shared_experts|num_shared_experts)$", 1),
    (r"^(image_size|img_size)$", 64),
    (r"^mamba_n_heads$", 4),
    (r"^mamba_d_head$", 2 * WIDTH // 4),
    (r"^mamba_d_ssm$", 2 * WIDTH),
    (r"^mamba_d_state$", 16),
    (r"^(max_position_embeddings|max_seq_len|n_positions|max_source_positions|max_target_positions)$", 512),
)
"""Entry-name pattern → the tiny value (applied only where the default is a larger int)."""
TOKEN_ID = re.compile(r"(_token_id|_token_index|_token_ids|_id)$")
PER_LAYER = ("layer_types", "mlp_only_layers", "no_rope_layers", "layers_block_type", "block_types")


def shrink(entries: dict[str, Any]) -> dict[str, Any]:
    """``entries`` (a config's ``to_dict()``) with every size made tiny, sub-configs included."""
    out = dict(entries)
    layers_before = next(
        (v for k, v in entries.items() if re.search(RULES[7][0], k) and isinstance(v, int)), None
    )
    for key, value in entries.items():
        if isinstance(value, dict) and ("model_type" in value or str(key).endswith("_config")):
            out[key] = shrink(value)
            continue
        if (
            isinstance(value, list)
            and value
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        ):
            out[key] = _shrunk_list(str(key), value)
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        for pattern, tiny in RULES:
            if re.search(pattern, key):
                out[key] = min(value, tiny) if value > 0 else value
                break
    _fit_patches(out)
    unscheduled = dict(out)
    _hybrid_schedule(out)
    scheduled = {k for k in out if out[k] != unscheduled.get(k)}
    if "kv_lora_rank" in out and isinstance(out.get("num_key_value_heads"), int):
        out["num_key_value_heads"] = out.get("num_attention_heads", HEADS)  # MLA: one key per head
    _per_layer_lists(out, entries, layers_before, scheduled)
    _renumber_tokens(out)
    return out


LIST_RULES = ((r"(^|_)(depths|num_layers|layers|blocks)$", 1), (r"(^|_)(num_heads|heads)$", 2))
LIST_WIDTHS = re.compile(r"(^|_)(hidden_sizes|embed_dims?|dims|channels|widths|hidden_dims)$")


def _shrunk_list(key: str, value: list[int]) -> list[int]:
    """Per-stage lists: depths to 1, head counts to 2, widths to 32 (keeping the stages)."""
    for pattern, tiny in LIST_RULES:
        if re.search(pattern, key):
            return [min(v, tiny) for v in value]
    if LIST_WIDTHS.search(key):
        return [min(v, 32) for v in value]
    return value


def _hybrid_schedule(out: dict[str, Any]) -> None:
    """Hybrids that place attention by index or period: attention at layer 1 of the 2 (0 is the other kind)."""
    if "attn_layer_indices" in out:  # Bamba's default (None) has no attention layer at all
        out["attn_layer_indices"] = [1]
    kinds = out.get("layer_types")
    if isinstance(kinds, list) and len(set(kinds)) == 1 and re.search("linear|mamba", str(kinds[0])):
        out["layer_types"] = [kinds[0], "attention"]  # a default without attention layers (GraniteMoeHybrid)
    if isinstance(out.get("attn_layer_period"), int):
        out["attn_layer_period"], out["attn_layer_offset"] = 2, 1
    for key, value in list(out.items()):
        if "pattern" in str(key) and isinstance(value, str) and len(value) > LAYERS:
            kinds = "".join(dict.fromkeys(value))
            out[key] = kinds
            layers = next(
                (k for k in out if re.search(RULES[7][0], str(k)) and isinstance(out[k], int)), None
            )
            if layers:
                out[layers] = len(kinds)


def _fit_patches(out: dict[str, Any]) -> None:
    patch = out.get("patch_size")
    if isinstance(patch, int) and isinstance(out.get("image_size"), int):
        out["image_size"] = max(out["image_size"], 4 * patch) // patch * patch


def _per_layer_lists(
    out: dict[str, Any], before: dict[str, Any], layers: int | None, scheduled: set[str]
) -> None:
    """Lists with one entry per layer keep the first layer of each kind; the layer count follows. The lists
    ``_hybrid_schedule`` rewrote (``scheduled``) stay as it wrote them."""
    key = next((k for k in out if re.search(RULES[7][0], k) and isinstance(out[k], int)), None)
    if key is None or not layers:
        return
    kinds = next(
        (before[k] for k in PER_LAYER if isinstance(before.get(k), list) and len(before[k]) == layers), None
    )
    if kinds is None:
        keep = list(range(min(layers, LAYERS)))
    else:
        firsts = {}
        for i, kind in enumerate(kinds):
            firsts.setdefault(str(kind), i)
        keep = sorted(firsts.values())[:4]
        if len(keep) < LAYERS:
            keep = sorted(set(keep) | set(range(min(layers, LAYERS))))
    out[key] = len(keep)
    for name, value in before.items():
        if isinstance(value, list) and len(value) == layers and layers > 1 and name not in scheduled:
            out[name] = [value[i] for i in keep]


def _renumber_tokens(out: dict[str, Any]) -> None:
    """Token ids beyond the tiny vocabulary (a multimodal config's: its text model's) get distinct ids
    at its top."""
    vocab = out.get("vocab_size") or (out.get("text_config") or {}).get("vocab_size")
    if not isinstance(vocab, int):
        return
    spare = vocab - 1
    for key, value in list(out.items()):
        if not TOKEN_ID.search(key) or key.startswith(("decoder_start", "forced")) and value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
            out[key] = spare
            spare -= 1
        elif (
            isinstance(value, list)
            and all(isinstance(v, int) for v in value)
            and any(v >= vocab for v in value)
        ):
            out[key] = [v if v < vocab else (spare := spare - 1) + 1 for v in value]
    if out.get("decoder_start_token_id") is None and "decoder_start_token_id" in out:
        out["decoder_start_token_id"] = 0


def reserved_tokens(entries: dict[str, Any]) -> set[int]:
    """Token ids the config names (pad, image, audio ...): inputs avoid them."""
    ids: set[int] = set()
    for key, value in entries.items():
        if isinstance(value, dict):
            ids |= reserved_tokens(value)
        elif TOKEN_ID.search(str(key)) and isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
        elif TOKEN_ID.search(str(key)) and isinstance(value, list):
            ids |= {v for v in value if isinstance(v, int)}
    return ids


def _mrope_sections(cls, entries: dict[str, Any]) -> None:
    """Multimodal rotary sections (t, h, w) that fit the tiny head: the modules' defaults split the
    rotary half of a full-size head. A config class says it takes them (``ignore_keys_at_rope_validation``)."""
    from transformers import CONFIG_MAPPING

    for key, sub in (getattr(cls, "sub_configs", None) or {}).items():
        if isinstance(entries.get(key), dict):
            kind = entries[key].get("model_type")
            _mrope_sections(CONFIG_MAPPING[kind] if kind in CONFIG_MAPPING else sub, entries[key])
    rope = entries.get("rope_parameters")
    if "mrope_section" not in getattr(cls, "ignore_keys_at_rope_validation", ()) or not isinstance(
        rope, dict
    ):
        return
    head = entries.get("head_dim") or entries.get("hidden_size", WIDTH) // entries.get(
        "num_attention_heads", HEADS
    )
    half = int(head * rope.get("partial_rotary_factor", entries.get("partial_rotary_factor", 1.0))) // 2
    rope["mrope_section"] = [half - 2 * (half // 3), half // 3, half // 3]


def tiny_config(model_type: str):
    """The tiny config of ``model_type`` (transformers' class built from the shrunk defaults)."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    entries = shrink(cls().to_dict())
    _mrope_sections(cls, entries)
    for drop in ("transformers_version", "_name_or_path", "architectures"):
        entries.pop(drop, None)
    return cls.from_dict(entries)
