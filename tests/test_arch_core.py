"""Conformance of the reference families (BERT, Llama) and of the engine on them."""

import pytest
import torch
from conformance import (
    BERT_SIZES,
    assert_conforms,
    build,
    capture_qk,
    layers_from_disk,
    tiny_config,
    token_inputs,
)

import attngeom


@pytest.fixture
def bert():
    return build(tiny_config("bert", **BERT_SIZES, vocab_size=100))


@pytest.fixture
def llama_gqa():
    config = tiny_config(
        "llama",
        hidden_size=48,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=10,
        num_hidden_layers=2,
        intermediate_size=64,
        vocab_size=100,
        attention_bias=True,
    )
    return build(config)


@pytest.mark.parametrize("name", ["bert", "llama_gqa"])
def test_forward_pass_conformance_from_disk(name, request, tmp_path):
    model = request.getfixturevalue(name)
    layers = layers_from_disk(model, tmp_path)
    inputs = token_inputs(model.config, zero_positions=name != "bert")
    assert_conforms(capture_qk(model, inputs), layers)


def test_disk_and_memory_scores_agree(llama_gqa, tmp_path):
    llama_gqa.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(llama_gqa, progress=False)
    assert len(on_disk) == 2 * (6 + 1)
    torch.testing.assert_close(
        torch.tensor(on_disk["symmetry"].to_numpy()), torch.tensor(in_memory["symmetry"].to_numpy())
    )
    layer_rows = on_disk[on_disk["head"].isna()]
    assert list(layer_rows["layer"]) == [0, 1]
    heads = on_disk[on_disk["head"].notna()]
    assert list(heads["kv_head"][:6]) == [0, 0, 0, 1, 1, 1]
    assert set(on_disk["head_dim"]) == {10}
