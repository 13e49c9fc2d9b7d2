"""Conformance of the GPT-lineage decoders (GPT-1/2, GPT-Neo, GPT-J, GPT-NeoX, BLOOM, Falcon, OPT).

Each map's W_q, W_k (read back from disk) must reproduce the q·k the model's own forward pass computes.
GPT-2, GPT-J, GPT-NeoX and OPT go through transformers' attention interface (``capture_qk``); GPT-1,
GPT-Neo, BLOOM and Falcon compute attention inline, so their q and k are taken from the model's own
method that hands them over (``_attn``) or splits the fused projection (``_reshape``, ``_split_heads``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from conformance import (
    Capture,
    assert_conforms,
    build,
    capture_method_qk,
    capture_qk,
    layers_from_disk,
    tiny_config,
    token_inputs,
)
from transformers import AutoModel, AutoModelForCausalLM

import attngeom
from attngeom.architectures import AttentionLayer


def _openai_gpt_attn(module, args, result):
    query, key = args[0], args[1]  # Attention._attn(q, k, v, ...) gets k already transposed: (B, H, d_h, N)
    return query, key.transpose(-1, -2)


def _gpt_neo_attn(module, args, result):
    return args[0], args[1]  # GPTNeoSelfAttention._attn(query, key, value, ...)


def _bloom_reshape(module, args, result):
    return result[0], result[1]  # BloomAttention._reshape -> q, k, v as (B, H, N, d_h)


def _falcon_split_heads(module, args, result):
    """FalconAttention._split_heads -> q, k, v as (B, N, heads, d_h)."""
    query, key = result[0].transpose(1, 2), result[1].transpose(1, 2)
    if module.new_decoder_architecture:
        # the model broadcasts each kv group's key to its G query heads; keep one copy per group,
        # after checking the copies are what the query heads of the group really use
        groups = key.unflatten(1, (module.num_kv_heads, -1))
        assert torch.equal(groups, groups[:, :, :1].expand_as(groups))
        key = groups[:, :, 0]
    return query, key


@dataclass(frozen=True)
class Case:
    model_type: str
    config: dict
    left_out: tuple[tuple[str, ...], ...]  # per layer
    capture: tuple | None = None  # (method, extract) for families outside the attention interface
    rotary: bool = False
    n_kv_heads: int | None = None


CASES = {
    "openai-gpt": Case(
        "openai-gpt",
        dict(n_embd=48, n_head=4, n_layer=2, n_positions=16),
        (("bias", "scale"),) * 2,  # learned positions are part of x
        capture=("_attn", _openai_gpt_attn),
    ),
    "gpt2": Case(
        "gpt2",
        dict(n_embd=48, n_head=4, n_layer=2, n_positions=16),
        (("bias", "scale"),) * 2,
    ),
    "gpt2_inverse_layer_scale": Case(
        "gpt2",
        dict(n_embd=48, n_head=4, n_layer=2, n_positions=16, scale_attn_by_inverse_layer_idx=True),
        (("bias", "scale"),) * 2,  # 1/(layer + 1) is one more constant factor: the scale
    ),
    "gpt_neo": Case(
        "gpt_neo",
        dict(
            hidden_size=48,
            num_heads=4,
            num_layers=2,
            attention_types=[[["global", "local"], 1]],
            window_size=3,
            max_position_embeddings=16,
        ),
        ((), ()),  # no scale, as the forward pass shows; its local window is a mask its config sets
        capture=("_attn", _gpt_neo_attn),
    ),
    "gptj": Case(
        "gptj",
        dict(n_embd=48, n_head=4, n_layer=2, rotary_dim=4, n_positions=16),
        (("rotary", "scale"),) * 2,
        rotary=True,
    ),
    "gpt_neox": Case(
        "gpt_neox",
        dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64),
        (("bias", "rotary", "scale"),) * 2,
        rotary=True,
    ),
    "gpt_neox_no_bias": Case(
        "gpt_neox",
        dict(
            hidden_size=64,
            num_attention_heads=4,
            num_hidden_layers=2,
            intermediate_size=64,
            attention_bias=False,
        ),
        (("rotary", "scale"),) * 2,
        rotary=True,
    ),
    "bloom": Case(
        "bloom",
        dict(hidden_size=48, n_head=4, n_layer=2),
        (("bias", "scale", "alibi"),) * 2,
        capture=("_reshape", _bloom_reshape),
    ),
    "falcon_new_gqa": Case(
        "falcon",
        dict(
            hidden_size=48,
            num_attention_heads=6,
            num_kv_heads=2,
            num_hidden_layers=2,
            new_decoder_architecture=True,
            bias=True,
        ),
        (("bias", "rotary", "scale"),) * 2,
        capture=("_split_heads", _falcon_split_heads),
        rotary=True,
        n_kv_heads=2,
    ),
    "falcon_multi_query": Case(
        "falcon",
        dict(hidden_size=48, num_attention_heads=4, num_hidden_layers=2, multi_query=True, bias=True),
        (("bias", "rotary", "scale"),) * 2,
        capture=("_split_heads", _falcon_split_heads),
        rotary=True,
        n_kv_heads=1,
    ),
    "falcon_classic_alibi": Case(
        "falcon",
        dict(
            hidden_size=48,
            num_attention_heads=4,
            num_hidden_layers=2,
            multi_query=False,
            alibi=True,
            bias=True,
            parallel_attn=False,
        ),
        (("bias", "alibi", "scale"),) * 2,
        capture=("_split_heads", _falcon_split_heads),
    ),
    "opt": Case(
        "opt",
        dict(
            hidden_size=48,
            num_attention_heads=4,
            num_hidden_layers=2,
            ffn_dim=64,
            word_embed_proj_dim=32,
            max_position_embeddings=16,
        ),
        (("bias", "scale"),) * 2,
    ),
}


def make(case: Case, model_class=AutoModel) -> torch.nn.Module:
    config = tiny_config(case.model_type, vocab_size=100, bos_token_id=0, eos_token_id=0, **case.config)
    return build(config, model_class)


def capture(case: Case, model: torch.nn.Module) -> list[Capture]:
    inputs = token_inputs(model.config, zero_positions=case.rotary)
    if case.capture is not None:
        return capture_method_qk(model, inputs, *case.capture)
    captures = capture_qk(model, inputs)
    if case.model_type == "opt":
        # OPT multiplies q_proj's output by its scaling before the attention call (which then uses
        # scaling=1); the map leaves that scale out, as every family's 1/√d_h, so undo it here
        scalings = [m.scaling for m in model.modules() if type(m).__name__ == "OPTAttention"]
        captures = [Capture(c.x, c.q / s, c.k) for c, s in zip(captures, scalings, strict=True)]
    return captures


@pytest.mark.parametrize("model_class", [AutoModel, AutoModelForCausalLM], ids=["base", "causal_lm"])
@pytest.mark.parametrize("name", list(CASES))
def test_forward_pass_conformance_from_disk(name, model_class, tmp_path):
    """The causal-LM checkpoint prefixes every name (transformer., gpt_neox., model.decoder.): read both."""
    case = CASES[name]
    model = make(case, model_class)
    layers = layers_from_disk(model, tmp_path)
    assert [layer.left_out for layer in layers] == list(case.left_out)
    assert_conforms(capture(case, model), layers)


@pytest.mark.parametrize("name", list(CASES))
def test_engine_scores_every_head_from_disk(name, tmp_path):
    case = CASES[name]
    model = make(case)
    model.save_pretrained(tmp_path)
    scores = attngeom.score(tmp_path, progress=False)
    heads = model.config.num_attention_heads
    kv_heads = case.n_kv_heads or heads
    n_layers = model.config.num_hidden_layers
    assert len(scores) == n_layers * (heads + 1)
    assert set(scores["model_type"]) == {case.model_type}
    assert set(scores["stack"]) == {"decoder"}
    assert set(scores["n_kv_heads"]) == {kv_heads}
    head_rows = scores[scores["head"].notna()]
    assert list(head_rows["kv_head"][:heads]) == [h // (heads // kv_heads) for h in range(heads)]
    assert list(scores.loc[scores["head"].isna(), "left_out"]) == [",".join(lo) for lo in case.left_out]
    assert scores[["symmetry", "directionality", "norm"]].notna().all().all()


@pytest.mark.parametrize("name", ["gpt_neox", "bloom", "falcon_classic_alibi"])
def test_first_rows_slicing_of_interleaved_qkv_fails_conformance(name, tmp_path):
    """The paper's reading of a per-head interleaved qkv (first d rows = W_q) must not pass the check."""
    case = CASES[name]
    model = make(case)
    layers = layers_from_disk(model, tmp_path)
    wrong = []
    for layer, attention in zip(layers, _fused_modules(model), strict=True):
        weight = attention.query_key_value.weight.detach()
        bias = attention.query_key_value.bias
        d = weight.shape[1]
        wrong.append(
            AttentionLayer(
                stack=layer.stack,
                layer=layer.layer,
                w_q=weight[:d].T,
                w_k=weight[d : 2 * d].T,
                b_q=None if bias is None else bias.detach()[:d],
                b_k=None if bias is None else bias.detach()[d : 2 * d],
                n_heads=layer.n_heads,
                n_kv_heads=layer.n_kv_heads,
                head_dim=layer.head_dim,
            )
        )
    with pytest.raises(AssertionError, match="relative error"):
        assert_conforms(capture(case, model), wrong)


def _fused_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if hasattr(m, "query_key_value")]


def test_gpt2_cross_attention_is_recorded_not_scored(tmp_path):
    """A GPT-2 with ``add_cross_attention`` (an encoder-decoder's decoder): its cross-attention's fused
    c_attn yields k and v only, a module its type's tiny model never had: recorded unscored, not read."""
    config = tiny_config("gpt2", vocab_size=100, **CASES["gpt2"].config, add_cross_attention=True)
    build(config).save_pretrained(tmp_path)
    scores = attngeom.score(tmp_path, progress=False)
    unscored = scores[scores["not_scored"].notna()]
    assert len(unscored) == 2 and unscored["not_scored"].str.contains("not validated").all()
    assert scores.loc[scores["not_scored"].isna(), "symmetry"].notna().all()
