"""What the conformance run observes, and how (issue 41): q and k compared where they enter the score
product, never with the projections' own outputs; roles from the attention probabilities the model's own
attention function computes, never from an ``is_causal`` flag; an error of the observation code fails the
run; optional towers validated on a config that builds them.

The small models here are registered as types of their own and checked by the run itself.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn
from transformers import AttentionInterface, AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

import attngeom.architectures.registry as registry
from attngeom.conformance.faults import ObservationError
from attngeom.conformance.run import _worker, check_type
from attngeom.engine import score


def eager_attention_forward(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """This file's eager attention, as a modeling file's: it never reads ``is_causal`` (BridgeTower's)."""
    scores = query @ key.mT * (scaling if scaling is not None else query.shape[-1] ** -0.5)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = scores.softmax(-1)
    return (weights @ value).transpose(1, 2).contiguous(), weights


class TinyConfig(PretrainedConfig):
    model_type = "attngeom_observed"

    def __init__(
        self,
        hidden_size=32,
        num_attention_heads=4,
        num_hidden_layers=2,
        vocab_size=40,
        flag=False,
        own_mask=False,
        multihead=False,
        **kw,
    ):
        super().__init__(**kw)
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.num_hidden_layers, self.vocab_size = num_hidden_layers, vocab_size
        self.flag, self.own_mask, self.multihead = flag, own_mask, multihead


class Attention(nn.Module):
    """Through the attention interface: ``is_causal`` set to ``config.flag``, a causal mask built here
    with ``config.own_mask``; with ``config.multihead``, q and k go through an ``nn.MultiheadAttention``
    after their projections instead (Aria's projector)."""

    def __init__(self, config):
        super().__init__()
        width, self.heads = config.hidden_size, config.num_attention_heads
        self.config, self.head_dim, self.is_causal = config, width // self.heads, config.flag
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(width, width) for _ in range(4))
        if config.multihead:
            self.multihead_attn = nn.MultiheadAttention(width, self.heads, batch_first=True)

    def forward(self, x):
        batch, n, width = x.shape
        if self.config.multihead:
            return self.multihead_attn(self.q_proj(x), self.k_proj(x), self.v_proj(x))[0]

        def heads(t):
            return t.view(batch, n, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        mask = None
        if self.config.own_mask:
            mask = torch.full((n, n), float("-inf"), dtype=x.dtype).triu(1)[None, None]
        function = AttentionInterface().get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        out, _ = function(self, q, k, v, mask)
        return self.o_proj(out.reshape(batch, n, width))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = Attention(config)

    def forward(self, x):
        return x + self.self_attn(x)


class TinyModel(PreTrainedModel):
    config_class = TinyConfig
    _supports_sdpa = True

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_hidden_layers))
        self.post_init()

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture(scope="module")
def tiny_type():
    AutoConfig.register(TinyConfig.model_type, TinyConfig, exist_ok=True)
    AutoModel.register(TinyConfig, TinyModel, exist_ok=True)
    return TinyConfig.model_type


def checked(monkeypatch, model_type: str, implementation: str = "eager", **settings) -> dict:
    import attngeom.conformance.tiny as tiny

    def config(t, towers=()):
        made = TinyConfig(**settings)
        made._attn_implementation_internal = implementation
        return made

    monkeypatch.setattr(tiny, "tiny_config", config)
    return check_type(model_type)


@pytest.mark.parametrize(
    ("implementation", "flag", "own_mask", "objective"),
    [
        ("eager", True, False, "bidirectional"),  # the flag says causal; the eager function never reads it
        ("eager", False, True, "autoregressive"),  # no flag; the module masks later tokens itself
        ("sdpa", True, False, "autoregressive"),  # sdpa reads the flag: the probabilities are causal
        ("sdpa", False, False, "bidirectional"),
    ],
)
def test_roles_come_from_the_probabilities_the_models_own_function_computes(
    tiny_type, monkeypatch, implementation, flag, own_mask, objective
):
    entry = checked(monkeypatch, tiny_type, implementation, flag=flag, own_mask=own_mask)
    assert entry["status"] == "validated", entry
    assert entry["objective"] == objective, entry
    assert entry["stacks"] == ["decoder" if objective == "autoregressive" else "encoder"]
    assert entry.get("causal_stacks", []) == (["decoder"] if objective == "autoregressive" else [])


def test_q_k_projections_behind_a_multihead_attention_are_scored_with_the_composed_maps(
    tiny_type, monkeypatch
):
    """nn.MultiheadAttention maps q_proj's and k_proj's outputs again before q·kᵀ: the form is the
    composition, checked against the q and k of that function's product; read as q_proj and k_proj alone
    (what the check compared with itself before) it is refused."""
    import attngeom.architectures.discovery.attention as discovery

    entry = checked(monkeypatch, tiny_type, multihead=True)
    assert entry["status"] == "validated", entry
    assert "nn.MultiheadAttention (the composed maps)" in entry["reason"]
    model = TinyModel(TinyConfig(multihead=True)).eval()
    monkeypatch.setattr(registry, "conformance", lambda: {tiny_type: entry})
    frame = score(model, progress=False)
    attn = model.layers[0].self_attn
    width = attn.q_proj.out_features
    inner = attn.multihead_attn.in_proj_weight.detach().double()
    w_q = attn.q_proj.weight.detach().double().T @ inner[:width].T
    w_k = attn.k_proj.weight.detach().double().T @ inner[width : 2 * width].T
    dense = w_q @ w_k.T
    expected = (torch.trace(dense @ dense) / (dense * dense).sum()).item()
    first = frame[(frame["layer"] == 0) & frame["head"].isna()]
    # the engine's float32 default: a score in [-1, 1], so float32's rounding is absolute (a score near 0,
    # -0.0058 once, differed by 1.3e-8 = 2.3e-6 of itself)
    assert first["symmetry"].item() == pytest.approx(expected, rel=1e-6, abs=1e-6)
    alone = (attn.q_proj.weight.T @ attn.k_proj.weight).detach().double()
    assert abs((torch.trace(alone @ alone) / (alone * alone).sum()).item() - expected) > 1e-3

    composed = discovery._composed
    monkeypatch.setattr(discovery, "_composed", lambda *args: replace(composed(*args), inner=""))
    refused = checked(monkeypatch, tiny_type, multihead=True)
    assert refused["status"] == "refused" and "q or k" in refused["reason"], refused


def test_an_error_of_the_observation_code_fails_the_run_instead_of_refusing_the_type(monkeypatch):
    """FSMT was refused as 'could not run the tiny model' for an error raised in attngeom's own code."""
    import attngeom.conformance.interface as interface

    def broken(mask, kwargs):
        raise RuntimeError("a defect of the observation code")

    monkeypatch.setattr(interface, "scoring", broken)
    with pytest.raises(ObservationError, match="capturing attention function: RuntimeError: a defect"):
        check_type("gpt2")
    with pytest.raises(ObservationError, match="^gpt2: "):
        _worker("gpt2")


def test_fsmt_time_first_q_and_k_are_validated_token_by_token():
    entry = check_type("fsmt")
    assert entry["status"] == "validated" and entry["objective"] == "encoder-decoder", entry
    assert entry["stacks"] == ["encoder", "decoder", "decoder_cross"]


@pytest.mark.slow  # four tiny Gemma 4 configs (2-45 s here, by load)
def test_gemma4_vision_and_audio_towers_are_validated_and_scored(monkeypatch):
    """Gemma 4's default config builds neither tower; a config with its vision tower validates it, one
    with its audio tower too (its attention casts q and k to float32: kept float64, it runs in float64)."""
    from attngeom.conformance.tiny import tiny_config

    entry = check_type("gemma4")
    assert entry["status"] == "validated" and entry["modality"] == "multimodal", entry
    for tower in ("vision_tower.", "audio_tower."):
        assert any(t.startswith(tower) for t in entry["templates"]), entry["templates"]
    assert "not validated" not in entry["reason"], entry["reason"]
    assert set(entry.get("causal_stacks", ())) <= set(entry["stacks"]), entry
    monkeypatch.setattr(registry, "conformance", lambda: {"gemma4": entry})
    for tower in ("vision_config", "audio_config"):
        model = AutoModel.from_config(tiny_config("gemma4", (tower,))).eval()
        frame = score(model, progress=False)
        scored = frame[frame["stack"].str.startswith(tower.replace("_config", "_tower"))]
        assert len(scored) and scored["not_scored"].isna().all() and scored["symmetry"].notna().all()
