"""Conformance of the encoder families added for today's models (encoders.py, longformer.py,
relative_encoders.py) against their own forward pass, with the layers read back from disk.

Families that form q·k in their own code hand over the operands of that very call
(``capture_call_operands``): RemBERT's and BigBird's matmul, Longformer's sliding-chunk product and
global ``bmm``, Funnel's and XLNet's content-term einsum (whose query already carries ``r_w_bias``).
"""

from dataclasses import replace

import pytest
import torch
from conformance import (
    BERT_SIZES,
    assert_conforms,
    build,
    capture_call_operands,
    capture_qk,
    layers_from_disk,
    randomize,
    tiny_config,
    token_inputs,
)
from transformers import FunnelModel
from transformers.models.big_bird.modeling_big_bird import BigBirdSelfAttention
from transformers.models.funnel.modeling_funnel import FunnelRelMultiheadAttention
from transformers.models.longformer.modeling_longformer import LongformerSelfAttention
from transformers.models.rembert.modeling_rembert import RemBertSelfAttention
from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

import attngeom
from attngeom.architectures import architecture_for

SMALL = {**BERT_SIZES, "vocab_size": 100}
FUNNEL = {"d_model": 32, "n_head": 4, "d_head": 8, "d_inner": 64, "vocab_size": 100, "block_sizes": [1, 2]}
XLNET = {"d_model": 32, "n_head": 4, "n_layer": 2, "d_inner": 64, "vocab_size": 100}
LONGFORMER = {**SMALL, "attention_window": 4, "pad_token_id": 1}


def _matmul_qk(q: torch.Tensor, k_t: torch.Tensor, *rest):
    """``torch.matmul(q, kᵀ)``: the first matmul of a BERT-style eager attention."""
    return (q, k_t.mT) if q.dim() == 4 else None


def _einsum_qk(equation: str):
    """The operands of ``torch.einsum(equation, q, k)``, laid out as (B, H, N, d_h)."""
    layout = equation.split(",")[0]

    def qk(eq, *operands):
        if eq != equation:
            return None
        order = [layout.index(axis) for axis in "bnid"]  # batch, heads, positions, head dims
        return tuple(t.permute(*order) for t in operands[:2])

    return qk


def _inputs(config, **extra) -> dict:
    return {**token_inputs(config, zero_positions=False), **extra}


def _funnel_qk_inputs(module, arguments):
    return arguments["query"], arguments["key"]


def _xlnet_qk_inputs(module, arguments):
    x = arguments["h"].transpose(0, 1)  # XLNet runs sequence-first
    return x, x


CASES = {
    # name: (model_type, sizes, capture(model) -> captures, the model scales q by 1/√d_h before q·k)
    "ernie": ("ernie", SMALL, lambda m: capture_qk(m, _inputs(m.config)), False),
    "data2vec-text": (
        "data2vec-text",
        {**SMALL, "pad_token_id": 1},
        lambda m: capture_qk(m, _inputs(m.config)),
        False,
    ),
    "rembert": (
        "rembert",
        {**SMALL, "input_embedding_size": 16},
        lambda m: capture_call_operands(
            m, _inputs(m.config), RemBertSelfAttention, torch, "matmul", _matmul_qk
        ),
        False,
    ),
    "esm_rotary": (
        "esm",
        {**SMALL, "pad_token_id": 1, "position_embedding_type": "rotary"},
        lambda m: capture_qk(m, token_inputs(m.config)),
        True,
    ),
    "esm_absolute": ("esm", {**SMALL, "pad_token_id": 1}, lambda m: capture_qk(m, _inputs(m.config)), True),
    "mobilebert": (
        "mobilebert",
        {**SMALL, "embedding_size": 16, "true_hidden_size": 16, "intra_bottleneck_size": 16},
        lambda m: capture_qk(m, _inputs(m.config)),
        False,
    ),
    "big_bird": (
        "big_bird",
        {**SMALL, "attention_type": "original_full"},
        lambda m: capture_call_operands(
            m, _inputs(m.config), BigBirdSelfAttention, torch, "matmul", _matmul_qk
        ),
        False,
    ),
    "funnel": (
        "funnel",
        FUNNEL,
        lambda m: capture_call_operands(
            m,
            _inputs(m.config),
            FunnelRelMultiheadAttention,
            torch,
            "einsum",
            _einsum_qk("bind,bjnd->bnij"),
            _funnel_qk_inputs,
        ),
        True,
    ),
    "xlnet": (
        "xlnet",
        XLNET,
        lambda m: capture_call_operands(
            m,
            _inputs(m.config),
            XLNetRelativeAttention,
            torch,
            "einsum",
            _einsum_qk("ibnd,jbnd->bnij"),
            _xlnet_qk_inputs,
        ),
        False,
    ),
}

FLOAT32_ROTARY = {"esm_rotary": 1e-6}
"""ESM rotates q and k in float32 even in a float64 model: they carry float32 rounding."""

LEFT_OUT = {
    "ernie": "bias,scale",  # discovered: terms outside the form only (absolute positions are part of x)
    "rembert": "bias,scale",
    "esm_rotary": "bias,rotary,scale",
    "esm_absolute": "bias,scale",
    "big_bird": "bias,scale",
    "funnel": "bias,scale,relative_position,segment_bias",
    "xlnet": "bias,scale,relative_position,segment_bias",
}


def make(name: str) -> torch.nn.Module:
    model_type, sizes, _, _ = CASES[name]
    config = tiny_config(model_type, **sizes)
    if model_type == "funnel":
        return randomize(FunnelModel(config))  # AutoModel needs ``architectures`` to choose the full model
    return build(config)


@pytest.mark.parametrize("name", list(CASES))
def test_forms_conform_from_disk(name, tmp_path):
    model = make(name)
    layers = layers_from_disk(model, tmp_path)
    *_, capture, q_scaled = CASES[name]
    assert_conforms(capture(model), layers, rtol=FLOAT32_ROTARY.get(name, 1e-9), q_scaled=q_scaled)
    if name in LEFT_OUT:
        assert {",".join(layer.left_out) for layer in layers} == {LEFT_OUT[name]}


def test_mobilebert_form_lives_in_the_bottleneck(tmp_path):
    layers = layers_from_disk(make("mobilebert"), tmp_path)
    assert {tuple(layer.w_q.shape) for layer in layers} == {(16, 16)}  # true_hidden_size, not hidden_size 48


def test_funnel_layers_follow_the_blocks_and_the_decoder(tmp_path):
    """Blocks of 1 and 2 layers (the second pooled), then FunnelModel's 2 upsampling layers. The pooled
    block's first layer reads pooled queries and unpooled keys: a cross form, as discovery calls keys
    read from another input (PVT's), with no symmetry; the forward pass shows the two inputs differ."""
    model = make("funnel")
    layers = layers_from_disk(model, tmp_path)
    assert [(layer.stack, layer.layer) for layer in layers] == [
        ("encoder", 0),
        ("encoder_cross", 1),
        ("encoder", 2),
        ("decoder", 0),
        ("decoder", 1),
    ]
    assert [layer.cross for layer in layers] == [False, True, False, False, False]
    *_, capture, _ = CASES["funnel"]
    captured = capture(model)
    pooled = captured[1]
    assert pooled.x_k is not None and pooled.x.shape[1] < pooled.x_k.shape[1]  # fewer queries than keys
    assert all(c.x_k is None for i, c in enumerate(captured[:3]) if i != 1)
    base = build(tiny_config("funnel", **FUNNEL, architectures=["FunnelBaseModel"]))  # AutoModel picks it
    base_layers = layers_from_disk(base, tmp_path / "base")
    assert {layer.stack for layer in base_layers} == {"encoder", "encoder_cross"}
    assert architecture_for(base.config).n_layers(base.config) == len(base_layers) == 3


def test_funnel_is_built_and_discovered_without_crashing():
    """Its auto mapping names two base classes: the first is built (AutoModel cannot choose without the
    config's architectures), and discovery's reason for it is about its attention, not its config."""
    from transformers import FunnelConfig

    from attngeom.architectures import REGISTRY
    from attngeom.architectures.discovery.attention import meta_model
    from attngeom.conformance.run import check_discovery

    assert type(meta_model(FunnelConfig())).__name__ == "FunnelModel"
    entry = check_discovery("funnel")[0]
    assert entry["status"] == "refused" and "layout not discovered" in entry["reason"], entry
    assert "does not build" not in REGISTRY["funnel"].why


def test_funnel_and_xlnet_need_the_content_bias(tmp_path):
    """Without r_w_bias as the query bias, the captured content term is not reproduced: the check can fail."""
    for name in ("funnel", "xlnet"):
        model = make(name)
        layers = layers_from_disk(model, tmp_path / name)
        *_, capture, q_scaled = CASES[name]
        with pytest.raises(AssertionError):
            assert_conforms(capture(model), [replace(layer, b_q=None) for layer in layers], q_scaled=q_scaled)


# --- Longformer: local and global stacks ------------------------------------------------------------------------


def longformer() -> torch.nn.Module:
    return build(tiny_config("longformer", **LONGFORMER))


def _sliding_qk(module, query, key, window_overlap):
    """Longformer's local product: q and k as (B, N, H, d_h), the first call in each attention call."""
    return query.transpose(1, 2), key.transpose(1, 2)


HEAD_DIM = SMALL["hidden_size"] // SMALL["num_attention_heads"]


def _global_qk(query, key_t):
    """The global rows' ``bmm(q_global, k_globalᵀ)``, (B·H, G, d_h) × (B·H, d_h, N); batch 2."""
    if query.shape[-1] != HEAD_DIM or key_t.shape[-2] != HEAD_DIM:  # the other bmm: probabilities × values
        return None
    return query.unflatten(0, (2, -1)), key_t.mT.unflatten(0, (2, -1))


def test_longformer_local_and_global_stacks_conform(tmp_path):
    model = longformer()
    layers = layers_from_disk(model, tmp_path)
    local = [layer for layer in layers if layer.stack == "encoder"]
    global_ = [layer for layer in layers if layer.stack == "encoder_global"]
    assert len(local) == len(global_) == 2
    assert all(layer.left_out[-1] == "sliding_window" for layer in local)
    inputs = {**token_inputs(model.config, length=12, zero_positions=False)}
    captures = capture_call_operands(
        model,
        inputs,
        LongformerSelfAttention,
        LongformerSelfAttention,
        "_sliding_chunks_query_key_matmul",
        _sliding_qk,
    )
    assert_conforms(captures, local, q_scaled=True)
    everything_global = {**inputs, "global_attention_mask": torch.ones_like(inputs["input_ids"])}
    captures = capture_call_operands(
        model, everything_global, LongformerSelfAttention, torch, "bmm", _global_qk
    )
    assert_conforms(captures, global_, q_scaled=True)
    with pytest.raises(AssertionError):  # the global rows really use other projections than the local ones
        assert_conforms(captures, local, q_scaled=True)


# --- the engine on every case -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*CASES, "longformer"])
def test_engine_end_to_end_on_disk_and_in_memory(name, tmp_path):
    model = longformer() if name == "longformer" else make(name)
    model.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    config = model.config
    assert set(on_disk["objective"]) == {"bidirectional"}
    layer_rows = on_disk[on_disk["head"].isna()]
    assert architecture_for(config).n_layers(config) == len(layer_rows)
    for column in ("symmetry", "directionality", "norm"):
        torch.testing.assert_close(  # a cross form's symmetry is NaN in both (Funnel's pooled queries)
            torch.tensor(on_disk[column].to_numpy()),
            torch.tensor(in_memory[column].to_numpy()),
            equal_nan=True,
        )
