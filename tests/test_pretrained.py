"""The two real pretrained models available offline, scored end to end from their installed package files."""

import math

import pytest
from safetensors import safe_open

import attngeom
from attngeom.packaged import packaged_model_path

MINILM = packaged_model_path("all-MiniLM-L6-v2")
SMOLLM2 = packaged_model_path("SmolLM2-135M-Instruct-Q4_1")


@pytest.fixture(scope="module")
def minilm():
    return attngeom.score(str(MINILM), progress=False)


@pytest.fixture(scope="module")
def smollm2():
    return attngeom.score(str(SMOLLM2), progress=False)


def test_minilm_encoder(minilm):
    assert set(minilm["model_type"]) == {"bert"} and set(minilm["objective"]) == {"bidirectional"}
    assert len(minilm) == 6 * (12 + 1)
    with safe_open(str(MINILM / "model.safetensors"), "pt") as handle:
        expected = sum(math.prod(handle.get_slice(k).get_shape()) for k in handle.keys())
    assert minilm["n_params"].iloc[0] == expected


def test_smollm2_gguf_decoder_with_grouped_query_attention(smollm2):
    assert set(smollm2["model_type"]) == {"llama"} and set(smollm2["objective"]) == {"autoregressive"}
    assert len(smollm2) == 30 * (9 + 1)
    heads = smollm2[smollm2["head"].notna()]
    assert set(heads["n_kv_heads"]) == {3} and set(heads["head_dim"]) == {64}
    assert heads["kv_head"].iloc[:9].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_encoder_is_more_symmetric_than_decoder(minilm, smollm2):
    """The paper's central finding, on the two real models: bidirectional training gives symmetric W_qk."""
    enc = minilm[minilm["head"].isna()]
    dec = smollm2[smollm2["head"].isna()]
    assert enc["symmetry"].median() > dec["symmetry"].median() + 0.2
    assert enc["symmetry"].between(-1, 1).all() and dec["directionality"].between(-1, 1).all()
