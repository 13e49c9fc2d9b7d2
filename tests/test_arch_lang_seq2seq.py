"""Encoder-decoder families added for today's models (LED, LongT5, Switch Transformers, MusicGen's decoder),
and partial checkpoints of encoder-decoder families: a decoder with its cross-attention alone
(``…ForCausalLM``) or an encoder alone (``…EncoderModel``, ``WhisperForAudioClassification``) scores the
stacks it holds, each checked against its own forward pass from the checkpoint on disk.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import transformers
from conformance import (
    assert_conforms,
    build,
    capture_call_operands,
    capture_projections,
    capture_qk_pairs,
    layers_from_disk,
    tiny_config,
)
from test_arch_seq2seq import (
    BART_SIZES,
    BATCH,
    SRC,
    TGT,
    _bart_like,
    _ids,
    _stacks_in_call_order,
    _t5,
    _whisper,
)
from transformers import AutoConfig
from transformers.models.led.modeling_led import LEDDecoderAttention, LEDEncoderSelfAttention
from transformers.models.longt5.modeling_longt5 import LongT5LocalAttention, LongT5TransientGlobalAttention

import attngeom
from attngeom.architectures import architecture_for
from attngeom.errors import InputError

CAUSAL_LM = {
    "bart": "BartForCausalLM",
    "mbart": "MBartForCausalLM",
    "marian": "MarianForCausalLM",
    "pegasus": "PegasusForCausalLM",
    "plbart": "PLBartForCausalLM",
    "blenderbot": "BlenderbotForCausalLM",
    "blenderbot-small": "BlenderbotSmallForCausalLM",
    "whisper": "WhisperForCausalLM",
}
"""Every encoder-decoder family of the registry whose decoder transformers offers alone."""
ENCODER_ONLY = {
    "t5": "T5EncoderModel",
    "mt5": "MT5EncoderModel",
    "umt5": "UMT5EncoderModel",
    "switch_transformers": "SwitchTransformersEncoderModel",
    "longt5": "LongT5EncoderModel",
    "whisper": "WhisperForAudioClassification",
}


def _of_class(name: str) -> SimpleNamespace:
    """``build`` needs a ``from_config``; these classes are built from their config directly."""
    return SimpleNamespace(from_config=getattr(transformers, name))


def _config(model_type: str):
    if model_type == "whisper":
        return _whisper()[0]
    if model_type in ("t5", "mt5", "umt5"):
        return _t5(model_type)[0]
    if model_type in ("switch_transformers", "longt5"):
        return _t5_like(model_type)
    return _bart_like(
        model_type, **({"decoder_vocab_size": 100, "pad_token_id": 1} if model_type == "marian" else {})
    )[0]


def _t5_like(model_type: str, **extra):
    sizes = dict(d_model=32, d_kv=6, num_heads=3, num_layers=2, num_decoder_layers=3, d_ff=32, vocab_size=100)
    if model_type == "switch_transformers":
        sizes.update(num_experts=2, num_sparse_encoder_layers=1, num_sparse_decoder_layers=1)
    return tiny_config(model_type, **sizes, **extra)


def _encoder_states(width: int = 32) -> torch.Tensor:
    return torch.randn(BATCH, SRC, width, generator=torch.Generator().manual_seed(5), dtype=torch.float64)


# --- partial checkpoints ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(CAUSAL_LM))
def test_decoder_only_checkpoint_scores_decoder_and_cross(model_type, tmp_path):
    model = build(_config(model_type), _of_class(CAUSAL_LM[model_type]))
    layers = layers_from_disk(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == [CAUSAL_LM[model_type]] and config["model_type"] == model_type
    assert [layer.stack for layer in layers] == ["decoder"] * 3 + ["decoder_cross"] * 3  # discovery's names
    states = _encoder_states()  # WhisperForCausalLM takes them as the encoder's outputs
    encoder = {"encoder_outputs": (states,)} if model_type == "whisper" else {"encoder_hidden_states": states}
    inputs = {"input_ids": _ids(TGT), **encoder, "use_cache": False}
    assert_conforms(
        capture_qk_pairs(model, inputs), _stacks_in_call_order(layers), q_scaled=model_type == "whisper"
    )
    scores = attngeom.score(tmp_path, progress=False)
    assert list(scores["stack"].unique()) == ["decoder", "decoder_cross"]
    assert architecture_for(model.config).n_layers(model.config) == 6


def _encoder_capture(model_type: str, model):
    if model_type == "whisper":
        features = torch.randn(BATCH, 8, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        return capture_qk_pairs(model, {"input_features": features})
    inputs = {"input_ids": _ids(SRC)}
    if model_type == "longt5":
        return capture_projections(model, inputs, LongT5LocalAttention, "q", "k")
    return capture_qk_pairs(model, inputs, module_filter=lambda m: "Layer" not in type(m).__name__)


@pytest.mark.parametrize("model_type", sorted(ENCODER_ONLY))
def test_encoder_only_checkpoint_scores_the_encoder(model_type, tmp_path):
    model = build(_config(model_type), _of_class(ENCODER_ONLY[model_type]))
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["encoder", "encoder"]
    assert_conforms(_encoder_capture(model_type, model), layers, q_scaled=model_type == "whisper")
    saved = AutoConfig.from_pretrained(tmp_path)
    assert saved.architectures == [ENCODER_ONLY[model_type]]
    assert architecture_for(saved).n_layers(saved) == 2


def test_a_complete_model_missing_its_encoder_is_an_error(tmp_path):
    """Tensor names alone do not decide: a checkpoint declared complete must hold every stack."""
    model = build(_config("bart"), _of_class("BartForCausalLM"))
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["architectures"] = ["BartForConditionalGeneration"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match=r"no tensor named 'model\.encoder\.layers\.0\.self_attn"):
        attngeom.score(tmp_path, progress=False)


def test_musicgen_decoder_checkpoint(tmp_path):
    from test_arch_seq2seq import _musicgen

    decoder = _musicgen()[0].decoder
    model = build(decoder, _of_class("MusicgenForCausalLM"))
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["decoder"] * 2 + ["cross"] * 2
    codes = torch.randint(0, 15, (BATCH * 2, TGT), generator=torch.Generator().manual_seed(2))
    inputs = {
        "input_ids": codes,
        "encoder_hidden_states": _encoder_states(decoder.hidden_size),
        "use_cache": False,
    }
    assert_conforms(capture_qk_pairs(model, inputs), _stacks_in_call_order(layers))


# --- new encoder-decoder families -------------------------------------------------------------------------------


def test_switch_transformers_is_t5_layout(tmp_path):
    model = build(_config("switch_transformers"))
    model.set_experts_implementation("eager")
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["encoder"] * 2 + ["decoder"] * 3 + ["decoder_cross"] * 3
    inputs = {"input_ids": _ids(SRC), "decoder_input_ids": _ids(TGT, seed=2)}
    captures = capture_qk_pairs(model, inputs, module_filter=lambda m: "Layer" not in type(m).__name__)
    assert_conforms(captures, _stacks_in_call_order(layers))


@pytest.mark.parametrize("attention", ["local", "transient-global"])
def test_longt5_encoder_and_decoder(attention, tmp_path):
    """The encoder's blocked attention is checked through its own q/k projections; decoder and cross through
    the q·k the model computes."""
    model = build(_t5_like("longt5", encoder_attention_type=attention))
    layers = layers_from_disk(model, tmp_path)
    encoder = [layer for layer in layers if layer.stack == "encoder"]
    assert {layer.left_out[-1] for layer in encoder} == {
        "local_window" if attention == "local" else "transient_global"
    }
    kind = LongT5LocalAttention if attention == "local" else LongT5TransientGlobalAttention
    inputs = {"input_ids": _ids(SRC), "decoder_input_ids": _ids(TGT, seed=2)}
    assert_conforms(capture_projections(model, inputs, kind, "q", "k"), encoder)
    decoder_side = capture_qk_pairs(
        model, inputs, module_filter=lambda m: type(m).__name__ == "LongT5Attention"
    )
    assert_conforms(
        decoder_side, _stacks_in_call_order([layer for layer in layers if layer.stack != "encoder"])
    )


def _sliding_qk(module, query, key, window_overlap):
    return query.transpose(1, 2), key.transpose(1, 2)


def _bmm_qk(head_dim: int):
    def qk(query, key_t):  # (B·H, N, d_h) × (B·H, d_h, M); the other bmm multiplies probabilities by values
        if query.shape[-1] != head_dim or key_t.shape[-2] != head_dim:
            return None
        return query.unflatten(0, (BATCH, -1)), key_t.mT.unflatten(0, (BATCH, -1))

    return qk


def test_led_longformer_encoder_and_bart_decoder(tmp_path):
    config = tiny_config(
        "led",
        **{k: v for k, v in BART_SIZES.items() if k != "max_position_embeddings"},
        attention_window=4,
        max_encoder_position_embeddings=32,
        max_decoder_position_embeddings=32,
    )
    model = build(config)
    layers = layers_from_disk(model, tmp_path)
    by_stack = {
        stack: [layer for layer in layers if layer.stack == stack]
        for stack in dict.fromkeys(layer.stack for layer in layers)
    }
    assert list(by_stack) == ["encoder", "encoder_global", "decoder", "cross"]
    ids = _ids(8)
    inputs = {"input_ids": ids, "decoder_input_ids": _ids(TGT, seed=2)}
    local = capture_call_operands(
        model,
        inputs,
        LEDEncoderSelfAttention,
        LEDEncoderSelfAttention,
        "_sliding_chunks_query_key_matmul",
        _sliding_qk,
    )
    assert_conforms(local, by_stack["encoder"], q_scaled=True)
    everything_global = {**inputs, "global_attention_mask": torch.ones_like(ids)}
    encoder_head, decoder_head = 32 // 4, 32 // 2
    global_ = capture_call_operands(
        model, everything_global, LEDEncoderSelfAttention, torch, "bmm", _bmm_qk(encoder_head)
    )
    assert_conforms(global_, by_stack["encoder_global"], q_scaled=True)
    decoder_side = capture_call_operands(
        model, inputs, LEDDecoderAttention, torch, "bmm", _bmm_qk(decoder_head)
    )
    assert_conforms(
        decoder_side, _stacks_in_call_order(by_stack["decoder"] + by_stack["cross"]), q_scaled=True
    )
    scores = attngeom.score(tmp_path, progress=False)
    assert architecture_for(model.config).n_layers(model.config) == scores[scores["head"].isna()].shape[0]
    assert scores[scores["stack"] == "cross"]["symmetry"].isna().all()
