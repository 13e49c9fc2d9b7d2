"""Conformance of the bidirectional encoder families: the mapped W_q, W_k reproduce each model's own q·k.

Families using transformers' attention interface are captured there (``conformance.capture_qk``);
ALBERT re-applies shared modules, so each call is paired with its own input; DeBERTa and MPNet do not
use the interface, so their real q and k are taken from the forward pass by hooks (before the
relative-position terms are added).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from conformance import (
    BERT_SIZES,
    Capture,
    assert_conforms,
    build,
    capture_method_qk,
    capture_projections,
    capture_qk,
    layers_from_disk,
    tiny_config,
    token_inputs,
)
from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForPreTraining
from transformers.models.deberta.modeling_deberta import scaled_size_sqrt
from transformers.models.mpnet.modeling_mpnet import MPNetSelfAttention

import attngeom
from attngeom.architectures import ArchitectureError, architecture_for
from attngeom.sources import open_source

VOCAB = {"vocab_size": 100}


# ---- capture helpers for layouts outside the attention interface ----------------------------------


def _deberta_qk(module, args, result):
    """The q and k DeBERTa (v1 or v2) hands to its relative-position term: exactly the content q·k operands.

    v2 passes them as (B·H, N, d_h) before scaling; v1 as (B, H, N, d_h) with q already divided by the
    scale, which is undone with the model's own ``scaled_size_sqrt``.
    """
    query, key, scale_factor = args[0], args[1], args[4]
    if query.dim() == 3:  # v2: (B·H, N, d_h)
        heads = module.num_attention_heads
        return query.reshape(-1, heads, *query.shape[1:]), key.reshape(-1, heads, *key.shape[1:])
    return query * scaled_size_sqrt(query, scale_factor).to(query.dtype), key  # v1: (B, H, N, d_h), q scaled


def capture_deberta(model: torch.nn.Module, inputs: dict) -> list[Capture]:
    method = (
        "disentangled_att_bias" if model.config.model_type == "deberta" else "disentangled_attention_bias"
    )
    records = capture_method_qk(model, inputs, method, _deberta_qk)
    assert records, "no DeBERTa relative-attention call was captured; is relative_attention on?"
    return records


def capture_mpnet(model: torch.nn.Module, inputs: dict) -> list[Capture]:
    """MPNet's q and k: the outputs of its own ``q``/``k`` projections, split into heads as its forward does."""
    return capture_projections(model, inputs, MPNetSelfAttention, "q", "k")


# ---- the families ------------------------------------------------------------------------------

ABSOLUTE = "bias,scale"  # learned absolute positions are part of x: no term of the score
MODERNBERT_TOKENS = {
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "cls_token_id": 1,
    "sep_token_id": 2,
}


@dataclass(frozen=True)
class Family:
    model_type: str
    overrides: dict
    left_out: str  # expected on layer 0
    model_class: type = AutoModel
    capture: Callable[[torch.nn.Module, dict], list[Capture]] = capture_qk
    zero_positions: bool = False  # position ids 0 make rotary the identity
    rtol: float = 1e-9
    stack: str = "encoder"


FAMILIES = {
    "bert": Family("bert", BERT_SIZES, ABSOLUTE),
    "roberta": Family("roberta", BERT_SIZES, ABSOLUTE, AutoModelForMaskedLM),
    "xlm-roberta": Family("xlm-roberta", BERT_SIZES, ABSOLUTE),
    "xlm-roberta-xl": Family("xlm-roberta-xl", BERT_SIZES, ABSOLUTE),
    "camembert": Family("camembert", BERT_SIZES, ABSOLUTE),
    "electra-discriminator": Family(
        "electra", {**BERT_SIZES, "embedding_size": 32}, ABSOLUTE, AutoModelForPreTraining
    ),
    "electra-generator": Family(
        "electra",
        {**BERT_SIZES, "hidden_size": 24, "num_attention_heads": 2, "embedding_size": 32},
        ABSOLUTE,
        AutoModelForMaskedLM,
    ),
    "distilbert": Family(
        "distilbert",
        {"dim": 48, "n_heads": 4, "n_layers": 2, "hidden_dim": 64},
        ABSOLUTE,
        AutoModelForMaskedLM,
    ),
    "albert-shared-groups": Family(
        "albert",
        {
            **BERT_SIZES,
            "num_hidden_layers": 3,
            "num_hidden_groups": 2,
            "inner_group_num": 2,
            "embedding_size": 32,
        },
        ABSOLUTE,
        AutoModelForMaskedLM,
    ),
    "albert-one-group": Family(
        "albert",
        {**BERT_SIZES, "num_hidden_layers": 3, "embedding_size": 32},
        ABSOLUTE,
    ),
    # ModernBERT's rotary step rounds q and k to float32 (even in a float64 model): compare to that precision.
    "modernbert": Family(
        "modernbert",
        {
            **BERT_SIZES,
            "num_hidden_layers": 3,
            "global_attn_every_n_layers": 2,
            "attention_bias": True,
            **MODERNBERT_TOKENS,
        },
        "bias,rotary,scale",
        AutoModelForMaskedLM,
        zero_positions=True,
        rtol=1e-6,
    ),
    "modernbert-no-bias": Family(
        "modernbert",
        {**BERT_SIZES, "num_hidden_layers": 3, **MODERNBERT_TOKENS},
        "rotary,scale",
        zero_positions=True,
        rtol=1e-6,
    ),
    "nomic_bert": Family("nomic_bert", BERT_SIZES, "rotary,scale", zero_positions=True),
    "deberta-v3": Family(
        "deberta-v2",
        {
            **BERT_SIZES,
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "share_att_key": True,
            "position_buckets": 8,
            "position_biased_input": False,
            "norm_rel_ebd": "layer_norm",
        },
        "bias,scale",  # discovery states the position terms its type's tiny (default) model shows
        AutoModelForMaskedLM,
        capture_deberta,
    ),
    "deberta-v2": Family(
        "deberta-v2",
        {**BERT_SIZES, "relative_attention": True, "pos_att_type": ["c2p", "p2c"], "conv_kernel_size": 3},
        "bias,scale",
        capture=capture_deberta,
    ),
    "deberta": Family(
        "deberta",
        {
            **BERT_SIZES,
            "relative_attention": True,
            "pos_att_type": ["c2p", "p2c"],
            "position_biased_input": False,
        },
        "bias,scale,relative_position",
        AutoModelForMaskedLM,
        capture_deberta,
        stack="encoder",
    ),
    "mpnet": Family("mpnet", BERT_SIZES, "bias,scale,relative_position", capture=capture_mpnet),
}


def albert_calls(config) -> list[tuple[int, int]]:
    """(group, inner layer) of every attention call, in the order ALBERT's forward runs them."""
    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    return [(int(i / (layers / groups)), j) for i in range(layers) for j in range(config.inner_group_num)]


def family_model(name: str) -> torch.nn.Module:
    family = FAMILIES[name]
    return build(tiny_config(family.model_type, **family.overrides, **VOCAB), family.model_class)


@pytest.mark.parametrize("name", FAMILIES)
def test_forward_pass_conformance_from_disk(name, tmp_path):
    family = FAMILIES[name]
    model = family_model(name)
    layers = layers_from_disk(model, tmp_path)
    if family.model_type == "albert":  # each stored layer once; the forward calls shared ones again
        layers = [layers[g * model.config.inner_group_num + j] for g, j in albert_calls(model.config)]
    captures = family.capture(model, token_inputs(model.config, zero_positions=family.zero_positions))
    assert_conforms(captures, layers, rtol=family.rtol)


@pytest.mark.parametrize("name", FAMILIES)
def test_engine_end_to_end(name, tmp_path):
    """Rows, head counts and what was left out, scored from disk; in memory gives the same scores."""
    family = FAMILIES[name]
    model = family_model(name)
    model.save_pretrained(tmp_path)
    scores = attngeom.score(tmp_path, progress=False)
    config = model.config
    heads = config.num_attention_heads
    n_layers = architecture_for(config).n_layers(config)
    assert len(scores) == n_layers * (heads + 1)
    assert set(scores["model_type"]) == {family.model_type}
    assert set(scores["objective"]) == {"bidirectional"}
    assert set(scores["stack"]) == {family.stack}
    assert set(scores["form"]) == {"standard"}
    assert scores["left_out"].iloc[0] == family.left_out
    assert list(scores[scores["head"].isna()]["layer"]) == list(range(n_layers))
    heads_rows = scores[scores["head"].notna()]
    assert (heads_rows["kv_head"] == heads_rows["head"]).all()
    assert scores["symmetry"].between(-1, 1).all() and (scores["norm"] > 0).all()
    in_memory = attngeom.score(model, progress=False)
    torch.testing.assert_close(
        torch.tensor(in_memory["symmetry"].to_numpy()), torch.tensor(scores["symmetry"].to_numpy())
    )


def test_albert_scores_each_stored_layer_once(tmp_path):
    """3 hidden layers over 2 groups of 2 inner layers: 4 stored layers, each one record (the forward
    calls group 0 twice, with the same weights)."""
    model = family_model("albert-shared-groups")
    layers = layers_from_disk(model, tmp_path)
    assert len(layers) == 4
    assert not any(torch.equal(layers[a].w_q, layers[b].w_q) for a in range(4) for b in range(a))


def test_modernbert_marks_sliding_window_layers(tmp_path):
    model = family_model("modernbert")
    layers = layers_from_disk(model, tmp_path)
    assert model.config.layer_types == ["full_attention", "sliding_attention", "full_attention"]
    assert ["sliding_window" in layer.left_out for layer in layers] == [False, True, False]


def test_nomic_bert_reads_fused_disk_and_split_memory_layouts(tmp_path):
    model = family_model("nomic_bert")
    from_disk = layers_from_disk(model, tmp_path)
    source = open_source(model)
    in_memory = list(architecture_for(model.config).layers(model.config, source))
    assert any(name.endswith("attn.Wqkv.weight") for name in open_source(tmp_path).names)
    for disk, memory in zip(from_disk, in_memory, strict=True):
        torch.testing.assert_close(disk.w_q, memory.w_q)
        torch.testing.assert_close(disk.w_k, memory.w_k)


@pytest.mark.parametrize("model_type", ["deberta", "deberta-v2"])
def test_deberta_attention_probabilities_without_relative_terms(model_type, tmp_path):
    """With relative attention off, the model's own attention probabilities are softmax(form / √d_h)."""
    config = tiny_config(model_type, **BERT_SIZES, **VOCAB, relative_attention=False, pos_att_type=None)
    model = build(config)
    layers = layers_from_disk(model, tmp_path)
    inputs = token_inputs(config, zero_positions=False)
    inputs_seen = []
    hooks = [
        m.register_forward_pre_hook(lambda m, args: inputs_seen.append(args[0]))
        for m in model.modules()
        if type(m).__name__ == "DisentangledSelfAttention"
    ]
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    for hook in hooks:
        hook.remove()
    for x, layer, probabilities in zip(inputs_seen, layers, attentions, strict=True):
        heads, head_dim = layer.n_heads, layer.head_dim
        q = (x @ layer.w_q + layer.b_q).unflatten(-1, (heads, head_dim)).transpose(1, 2)
        k = x @ layer.w_k
        if layer.b_k is not None:
            k = k + layer.b_k
        k = k.unflatten(-1, (heads, head_dim)).transpose(1, 2)
        scale = torch.tensor(float(head_dim)).sqrt().double()  # DeBERTa's scale is a float32 tensor
        expected = torch.softmax(q @ k.mT / scale, dim=-1)
        torch.testing.assert_close(probabilities, expected, rtol=1e-9, atol=1e-12)


def test_deberta_talking_head_is_refused(tmp_path):
    config = tiny_config("deberta", **BERT_SIZES, **VOCAB, talking_head=True)
    with pytest.raises(ArchitectureError, match="talking_head"):
        layers_from_disk(build(config), tmp_path)


def test_causal_bert_decoder_conforms(tmp_path):
    """The training runs score BERT with is_decoder=True (causal mask): the same q/k layout."""
    model = build(tiny_config("bert", **BERT_SIZES, **VOCAB, is_decoder=True), AutoModelForCausalLM)
    assert_conforms(
        capture_qk(model, token_inputs(model.config, zero_positions=False)), layers_from_disk(model, tmp_path)
    )
    frame = attngeom.score(tmp_path, progress=False)
    assert set(frame["objective"]) == {"autoregressive"} and set(frame["stack"]) == {"decoder"}
