"""SeamlessM4T: every stack of the full model against its own forward pass, and the task-specific classes
(text-to-text, speech-to-text) scoring the stacks they hold."""

from dataclasses import replace

import pytest
import torch
import transformers
from conformance import (
    assert_conforms,
    capture_qk,
    capture_qk_pairs,
    layers_from_disk,
    randomize,
    tiny_config,
)

import attngeom
from attngeom.architectures import architecture_for

BATCH, SRC, TGT = 2, 6, 5
SIZES = dict(
    hidden_size=32,
    vocab_size=100,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    speech_encoder_layers=2,
    speech_encoder_attention_heads=4,
    speech_encoder_intermediate_size=32,
    feature_projection_input_dim=16,
    t2u_encoder_layers=1,
    t2u_decoder_layers=2,
    t2u_encoder_attention_heads=2,
    t2u_decoder_attention_heads=4,
    t2u_encoder_ffn_dim=32,
    t2u_decoder_ffn_dim=32,
    t2u_vocab_size=50,
    unit_embed_dim=16,
    unit_hifi_gan_vocab_size=20,
    upsample_initial_channel=64,  # the vocoder halves it five times
    spkr_embed_dim=8,
    lang_embed_dim=8,
    vocoder_num_langs=2,
    vocoder_num_spkrs=2,
)
STACKS = [
    "text_encoder",
    "speech_encoder",
    "speech_adapter",
    "decoder",
    "cross",
    "t2u_encoder",
    "t2u_decoder",
    "t2u_cross",
]


def _ids(n: int, vocab: int = 100, seed: int = 1) -> torch.Tensor:
    return torch.randint(4, vocab, (BATCH, n), generator=torch.Generator().manual_seed(seed))


def _states(n: int, width: int, seed: int) -> torch.Tensor:
    return torch.randn(BATCH, n, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def make(class_name: str = "SeamlessM4TModel") -> torch.nn.Module:
    return randomize(getattr(transformers, class_name)(tiny_config("seamless_m4t", **SIZES)))


@pytest.fixture(scope="module")
def full() -> torch.nn.Module:
    return make()


def _self_then_cross(decoder: list, cross: list) -> list:
    """A decoder layer runs its self-attention, then its cross-attention."""
    return [layer for pair in zip(decoder, cross, strict=True) for layer in pair]


def test_every_stack_conforms_from_disk(full, tmp_path):
    layers = layers_from_disk(full, tmp_path)
    stacks = {name: [layer for layer in layers if layer.stack == name] for name in STACKS}
    assert [layer.stack for layer in layers] == [name for name in STACKS for _ in stacks[name]]
    assert {name: len(stack) for name, stack in stacks.items()} == {
        "text_encoder": 2,
        "speech_encoder": 2,
        "speech_adapter": 1,
        "decoder": 2,
        "cross": 2,
        "t2u_encoder": 1,
        "t2u_decoder": 2,
        "t2u_cross": 2,
    }
    assert_conforms(capture_qk(full.text_encoder, {"input_ids": _ids(SRC)}), stacks["text_encoder"])
    speech = capture_qk(full.speech_encoder, {"input_features": _states(16, 16, seed=3)})
    assert_conforms(speech, stacks["speech_encoder"] + stacks["speech_adapter"])
    text_decoder = {
        "input_ids": _ids(TGT),
        "encoder_hidden_states": _states(SRC, 32, seed=4),
        "use_cache": False,
    }
    captures = capture_qk_pairs(full.text_decoder, text_decoder)
    assert_conforms(captures, _self_then_cross(stacks["decoder"], stacks["cross"]))
    units = {
        "inputs_embeds": _states(SRC, 32, seed=5),
        "decoder_input_ids": _ids(TGT, vocab=50),
        "use_cache": False,
    }
    captures = capture_qk_pairs(full.t2u_model.model, units)
    t2u = stacks["t2u_encoder"] + _self_then_cross(stacks["t2u_decoder"], stacks["t2u_cross"])
    assert_conforms(captures, t2u)


def test_speech_encoder_query_carries_the_content_bias(full, tmp_path):
    """Without pos_bias_u in b_q the Conformer's content term is not reproduced: the check can fail."""
    layers = [layer for layer in layers_from_disk(full, tmp_path) if layer.stack == "speech_encoder"]
    speech = capture_qk(full.speech_encoder, {"input_features": _states(16, 16, seed=3)})[:2]
    attention = full.speech_encoder.encoder.layers[0].self_attn
    plain = replace(layers[0], b_q=attention.linear_q.bias.detach())
    with pytest.raises(AssertionError):
        assert_conforms(speech[:1], [plain])
    assert "relative_position" in layers[0].left_out


@pytest.mark.parametrize(
    "class_name, stacks",
    [
        ("SeamlessM4TForTextToText", ["text_encoder", "decoder", "cross"]),
        ("SeamlessM4TForSpeechToText", ["speech_encoder", "speech_adapter", "decoder", "cross"]),
        (
            "SeamlessM4TForTextToSpeech",
            ["text_encoder", "decoder", "cross", "t2u_encoder", "t2u_decoder", "t2u_cross"],
        ),
    ],
)
def test_task_classes_score_the_stacks_they_hold(class_name, stacks, tmp_path):
    model = make(class_name)
    model.save_pretrained(tmp_path)
    scores = attngeom.score(tmp_path, progress=False)
    assert list(scores["stack"].unique()) == stacks
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert architecture_for(config).n_layers(config) == len(scores[scores["head"].isna()])
    modality = scores.groupby("stack")["modality"].first()
    assert modality["decoder"] == "language" and modality["cross"] == "multimodal"


def test_full_model_on_disk_and_in_memory(full, tmp_path):
    full.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(full, progress=False)
    assert list(on_disk["stack"].unique()) == STACKS
    assert on_disk[on_disk["stack"].str.contains("cross")]["symmetry"].isna().all()
    torch.testing.assert_close(
        torch.tensor(on_disk["norm"].to_numpy(float)), torch.tensor(in_memory["norm"].to_numpy(float))
    )
