"""The tiny sizes of the generated conformance, and which config entries they apply to by name."""

from __future__ import annotations

import re
from typing import Any

WIDTH, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB, FFN = 64, 4, 2, 16, 2, 128, 64

LAYER_KEYS = r"(^|_)(num_hidden_layers|n_layers?|num_layers|encoder_layers|decoder_layers|depth)$"
HEAD_COUNTS = r"(^|_)(num_attention_heads|attention_heads|n_heads?|num_heads|heads)$"
KV_HEAD_COUNTS = (
    r"^(num_key_value_heads|num_kv_heads|n_kv_heads?|multi_query_group_num|num_key_value_groups)$"
)
HEAD_WIDTHS = r"^(head_dim|attention_head_dim|d_kv|kv_channels|qk_nope_head_dim|v_head_dim|head_size)$"
"""The entries that are one head's width."""
EXPERTS = r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|num_routed_experts)$"
PER_TOKEN = r"^(num_experts_per_tok|num_experts_per_token|moe_topk|moe_k|top_k|num_selected_experts)$"
COUNT_RULES: tuple[tuple[str, int], ...] = (
    (LAYER_KEYS, LAYERS),
    (r"(^|_)vocab_size(_per_layer_input)?$", VOCAB),  # Gemma 3n's and 4's per-layer embeddings too
    (EXPERTS, 4),
    (PER_TOKEN, 2),
    (r"^(n_group|topk_group|n_shared_experts|num_shared_experts)$", 1),
    (r"^(max_position_embeddings|max_seq_len|n_positions|max_source_positions|max_target_positions)$", 512),
)
"""The counts: layers, vocabulary, experts, positions (shrunk even where the widths must stay)."""
RULES: tuple[tuple[str, int], ...] = (
    (KV_HEAD_COUNTS, KV_HEADS),
    (HEAD_COUNTS, HEADS),
    (HEAD_WIDTHS, HEAD_DIM),
    (r"^qk_rope_head_dim$", 8),
    (r"^(q_lora_rank|kv_lora_rank)$", 32),
    (r"(^|_)(hidden_size|d_model|n_embd|embed_dim|dim|hidden_dim|embedding_size|projection_dim)$", WIDTH),
    (r"^(word_embed_proj_dim|n_positions_dim|proj_dim|output_dim|text_embed_dim|vision_embed_dim)$", WIDTH),
    (r"(^|_)(intermediate_size|ffn_dim|n_inner|d_ff|mlp_dim|ffn_hidden_size|intermediate_dim)$", FFN),
    (r"^(image_size|img_size)$", 64),
    (r"^mamba_n_heads$", 4),
    (r"^mamba_d_head$", 2 * WIDTH // 4),
    (r"^mamba_d_ssm$", 2 * WIDTH),
    (r"^mamba_d_state$", 16),
    *COUNT_RULES,
)
"""Entry-name pattern → the tiny value (applied only where the default is a larger int)."""


def all_layers(entries: dict[str, Any], out: dict[str, Any], before: int | None) -> None:
    """A count of layers that is all of them by default (Gemma 4 assistant's KV-sharing layers) stays all
    of them in ``out``, the tiny entries."""
    tiny = next((v for k, v in out.items() if re.search(LAYER_KEYS, str(k)) and isinstance(v, int)), None)
    for key, value in entries.items():
        if isinstance(value, int) and value == before and re.search(r"_layers$", str(key)):
            out[key] = out[key] if re.search(LAYER_KEYS, str(key)) else tiny
