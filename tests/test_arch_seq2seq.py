"""Conformance of the encoder-decoder families: encoder, decoder and cross (decoder × encoder) stacks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from conformance import (
    assert_conforms,
    build,
    capture_projections,
    capture_qk_pairs,
    layers_from_disk,
    position_augmented_inputs,
    tiny_config,
)
from transformers import AutoModel

import attngeom
from attngeom.architectures import REGISTRY, ArchitectureError, AttentionLayer
from attngeom.scores import score_factors

BATCH, SRC, TGT = 2, 6, 5
BART_SIZES = dict(
    d_model=32,
    encoder_layers=2,
    decoder_layers=3,
    encoder_attention_heads=4,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    vocab_size=100,
    max_position_embeddings=32,
)


def _ids(n: int, vocab: int = 100, seed: int = 1) -> torch.Tensor:
    return torch.randint(4, vocab, (BATCH, n), generator=torch.Generator().manual_seed(seed))


def _text_inputs(config) -> dict:
    return {"input_ids": _ids(SRC), "decoder_input_ids": _ids(TGT, seed=2)}


def _bart_like(model_type: str, **extra):
    return tiny_config(model_type, **BART_SIZES, **extra), _text_inputs


def _t5(model_type: str):
    config = tiny_config(
        model_type,
        d_model=32,
        d_kv=6,
        num_heads=3,
        num_layers=2,
        num_decoder_layers=3,
        d_ff=32,
        vocab_size=100,
    )
    return config, _text_inputs


def _whisper():
    sizes = {k: v for k, v in BART_SIZES.items() if k != "max_position_embeddings"}
    config = tiny_config(
        "whisper",
        **sizes,
        num_mel_bins=8,
        max_source_positions=8,
        max_target_positions=16,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=3,
        begin_suppress_tokens=None,
        suppress_tokens=None,
    )

    def inputs(config) -> dict:
        features = torch.randn(BATCH, 8, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        return {"input_features": features, "decoder_input_ids": _ids(TGT)}

    return config, inputs


def _speech_to_text():
    config = tiny_config(
        "speech_to_text",
        **BART_SIZES,
        input_feat_per_channel=8,
        num_conv_layers=1,
        conv_kernel_sizes=[3],
        conv_channels=16,
        max_source_positions=32,
        max_target_positions=32,
    )

    def inputs(config) -> dict:
        features = torch.randn(BATCH, 12, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        return {"input_features": features, "decoder_input_ids": _ids(TGT)}

    return config, inputs


def _speecht5():
    sizes = {k: v for k, v in BART_SIZES.items() if k not in ("d_model", "max_position_embeddings")}
    config = tiny_config("speecht5", hidden_size=32, **sizes, encoder_max_relative_position=8)

    def inputs(config) -> dict:
        g = torch.Generator().manual_seed(3)
        return {
            "input_values": torch.randn(BATCH, SRC, 32, generator=g, dtype=torch.float64),
            "decoder_input_values": torch.randn(BATCH, TGT, 32, generator=g, dtype=torch.float64),
        }

    return config, inputs


def _musicgen():
    from transformers import EncodecConfig, MusicgenConfig, MusicgenDecoderConfig, T5Config

    text = T5Config(d_model=24, d_kv=8, num_heads=3, num_layers=2, d_ff=32, vocab_size=100)
    audio = EncodecConfig(
        hidden_size=16, num_filters=4, codebook_size=16, codebook_dim=16, upsampling_ratios=[2, 2]
    )
    decoder = MusicgenDecoderConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=32,
        vocab_size=16,
        num_codebooks=2,
        pad_token_id=15,
        bos_token_id=15,
    )
    config = MusicgenConfig(
        text_encoder=text.to_dict(), audio_encoder=audio.to_dict(), decoder=decoder.to_dict()
    )

    def inputs(config) -> dict:
        codes = torch.randint(0, 15, (BATCH * 2, TGT), generator=torch.Generator().manual_seed(2))
        return {"input_ids": _ids(SRC), "decoder_input_ids": codes}

    return config, inputs


def _detr():
    from transformers import ResNetConfig

    backbone = ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], out_features=["stage2"])
    config = tiny_config(
        "detr",
        **{k: v for k, v in BART_SIZES.items() if k not in ("vocab_size", "max_position_embeddings")},
        num_queries=5,
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone.to_dict(),
    )

    def inputs(config) -> dict:
        pixels = torch.randn(
            BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64
        )
        return {"pixel_values": pixels}

    return config, inputs


CASES = {
    "bart": lambda: _bart_like("bart"),
    "mbart": lambda: _bart_like("mbart"),
    "marian": lambda: _bart_like("marian", decoder_vocab_size=100, pad_token_id=1),
    "pegasus": lambda: _bart_like("pegasus"),
    "m2m_100": lambda: _bart_like("m2m_100"),
    "plbart": lambda: _bart_like("plbart"),
    "blenderbot": lambda: _bart_like("blenderbot"),
    "blenderbot-small": lambda: _bart_like("blenderbot-small"),
    "t5": lambda: _t5("t5"),
    "mt5": lambda: _t5("mt5"),
    "umt5": lambda: _t5("umt5"),
    "whisper": _whisper,
    "speech_to_text": _speech_to_text,
    "speecht5": _speecht5,
    "musicgen": _musicgen,
    "detr": _detr,
}


def _model_class(model_type: str):
    """MusicGen has no AutoModel entry; ``build`` needs a ``from_config``."""
    if model_type == "musicgen":
        from transformers import MusicgenForConditionalGeneration

        return SimpleNamespace(from_config=MusicgenForConditionalGeneration)
    return AutoModel


def _stacks_in_call_order(layers: list[AttentionLayer]) -> list[AttentionLayer]:
    """The model runs encoder layers first, then per decoder layer its self-attention and then cross."""
    encoder = [layer for layer in layers if layer.stack == "encoder"]
    decoder = [layer for layer in layers if layer.stack == "decoder"]
    cross = [layer for layer in layers if layer.cross]
    assert len(decoder) == len(cross)
    return encoder + [layer for pair in zip(decoder, cross, strict=True) for layer in pair]


def _capture(model_type: str, model, inputs):
    if model_type == "speecht5":
        from transformers.models.speecht5.modeling_speecht5 import SpeechT5Attention

        return capture_projections(model, inputs, SpeechT5Attention, "q_proj", "k_proj")
    if model_type == "detr":
        return capture_qk_pairs(model, inputs, position_augmented_inputs)
    # T5 wraps T5Attention in T5Layer{Self,Cross}Attention: only the inner modules project q and k.
    return capture_qk_pairs(model, inputs, module_filter=lambda m: "Layer" not in type(m).__name__)


@pytest.fixture(scope="module")
def built() -> dict:
    cache: dict = {}

    def get(model_type: str):
        if model_type not in cache:
            config, inputs = CASES[model_type]()
            cache[model_type] = (build(config, _model_class(model_type)), inputs)
        return cache[model_type]

    return get


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_forward_pass_conformance_from_disk(model_type, built, tmp_path):
    model, inputs = built(model_type)
    layers = layers_from_disk(model, tmp_path)
    cross = "cross" if model_type in REGISTRY else "decoder_cross"  # a table's name, or discovery's
    assert {layer.stack for layer in layers} == {"encoder", "decoder", cross}
    captures = _capture(model_type, model, inputs(model.config))
    assert_conforms(captures, _stacks_in_call_order(layers), q_scaled=model_type == "whisper")


@pytest.mark.parametrize("model_type", ["bart", "t5", "whisper", "musicgen", "detr"])
def test_engine_rows_per_stack(model_type, built, tmp_path):
    model, _ = built(model_type)
    model.save_pretrained(tmp_path)
    frame = attngeom.score(tmp_path, progress=False)
    layers = layers_from_disk(model, tmp_path / "again")
    expected = sum(layer.n_heads + 1 for layer in layers)
    assert len(frame) == expected
    assert set(frame["objective"]) == {"encoder-decoder"}
    cross = frame[frame["stack"].str.contains("cross")]
    own = frame[~frame["stack"].str.contains("cross")]
    assert cross["symmetry"].isna().all() and own["symmetry"].notna().all()
    assert cross["directionality"].notna().all() and (cross["norm"] > 0).all()
    assert set(cross["form"]) == {layers[-1].form} and layers[-1].cross


def test_whisper_key_has_no_bias(built, tmp_path):
    model, _ = built("whisper")
    layers = layers_from_disk(model, tmp_path)
    assert all(layer.b_k is None and layer.b_q is not None for layer in layers)


def test_t5_head_width_is_d_kv(built, tmp_path):
    model, _ = built("t5")
    layers = layers_from_disk(model, tmp_path)
    assert {layer.head_dim for layer in layers} == {6}
    assert [layer.stack for layer in layers].count("decoder") == 3
    assert all("scale" not in layer.left_out and "bias" not in layer.left_out for layer in layers)


def test_cross_form_matches_dense_rectangular_scores():
    """Directionality and norm of a two-space form equal those of the dense d_q × d_k matrix."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 12, 5, generator=g, dtype=torch.float64)
    b = torch.randn(3, 9, 5, generator=g, dtype=torch.float64)
    a[:, 2] *= 6  # a dominant query-side row
    m = a @ b.mT
    factored = score_factors(a, b, square=False)
    rows, cols = torch.linalg.vector_norm(m, dim=-1), torch.linalg.vector_norm(m, dim=-2)

    def excess(norms: torch.Tensor) -> torch.Tensor:
        threshold = norms.mean(-1, keepdim=True) + 2 * norms.std(-1, keepdim=True)
        return torch.where(norms > threshold, norms - threshold, torch.zeros_like(norms)).sum(-1)

    r, c = excess(rows), excess(cols)
    torch.testing.assert_close(factored.directionality, (r - c) / (r + c))
    torch.testing.assert_close(factored.norm, torch.linalg.matrix_norm(m))
    assert factored.symmetry is None and (factored.directionality > 0).all()


def test_cross_stack_names_contain_cross():
    with pytest.raises(ArchitectureError, match="must have 'cross' in its name"):
        AttentionLayer("image_to_token", 0, torch.zeros(8, 4), torch.zeros(6, 4), 1, 1, 4, cross=True)


def test_self_layer_with_mismatched_widths_is_refused():
    with pytest.raises(ArchitectureError, match="do not match"):
        AttentionLayer(
            "decoder", 0, torch.zeros(8, 4), torch.zeros(6, 4), n_heads=1, n_kv_heads=1, head_dim=4
        )
    AttentionLayer(
        "cross", 0, torch.zeros(8, 4), torch.zeros(6, 4), n_heads=1, n_kv_heads=1, head_dim=4, cross=True
    )


@pytest.mark.parametrize("model_type", ["bart", "t5", "whisper", "speecht5", "musicgen", "detr"])
def test_disk_and_memory_agree(model_type, built, tmp_path):
    model, _ = built(model_type)
    model.save_pretrained(tmp_path)
    on_disk = attngeom.score(tmp_path, progress=False)
    in_memory = attngeom.score(model, progress=False)
    assert list(on_disk["stack"]) == list(in_memory["stack"])
    torch.testing.assert_close(
        torch.tensor(on_disk["norm"].to_numpy(float)), torch.tensor(in_memory["norm"].to_numpy(float))
    )


def test_t5_encoder_only_checkpoint(tmp_path):
    from transformers import T5EncoderModel

    config, inputs = _t5("t5")
    model = build(config, SimpleNamespace(from_config=T5EncoderModel))
    layers = layers_from_disk(model, tmp_path)
    assert [layer.stack for layer in layers] == ["encoder", "encoder"]
    captures = capture_qk_pairs(
        model,
        {"input_ids": inputs(config)["input_ids"]},
        module_filter=lambda m: "Layer" not in type(m).__name__,
    )
    assert_conforms(captures, layers)
