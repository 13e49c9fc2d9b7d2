"""The conformance fallback: attention modules driven through their own forward where the whole tiny model's
forward pass does not run (``conformance/modules.py``). It must validate a right discovery, refuse a wrong
one, and never validate a module whose own forward did not run."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import PretrainedConfig

import attngeom.architectures.discovered as discovered
import attngeom.architectures.discovery as discovery
from attngeom.architectures import REGISTRY, support
from attngeom.architectures.discovery import Found
from attngeom.architectures.validated import conformance
from attngeom.conformance.modules import drive
from attngeom.conformance.run import OWN_FORWARD, check_type

WHOLE_FAILS = "inkling2_vision"
"""Its whole forward takes each image token's block of patches as (tokens, p·m, p·m, channels), which the
generic inputs do not make; its attention modules (packed sequences, rotary embeddings) run on their own."""


def test_a_type_whose_whole_forward_fails_is_validated_on_its_modules_and_says_so():
    entry = check_type(WHOLE_FAILS)
    assert entry["status"] == "validated", entry["reason"]
    assert entry["own_forward"] == entry["stacks"] == ["self"]
    assert OWN_FORWARD in entry["reason"] and "whole forward pass did not run" in entry["reason"]


def _wrong(change):
    real = discovery.find_attention

    def find_attention(model, config, layout=""):
        return [change(i) if isinstance(i, Found) else i for i in real(model, config, layout)]

    return find_attention


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda i: replace(i, q=i.k, k=i.q, q_bias=i.k_bias, k_bias=i.q_bias), id="swapped-q-k"),
        pytest.param(
            lambda i: replace(
                i, n_heads=i.n_heads // 2, n_kv_heads=i.n_kv_heads // 2, head_dim=2 * i.head_dim
            ),
            id="half-the-heads",
        ),
    ],
)
def test_a_wrong_discovery_fails_the_module_level_check(monkeypatch, change):
    wrong = _wrong(change)
    monkeypatch.setattr(discovery, "find_attention", wrong)
    monkeypatch.setattr(discovered, "find_attention", wrong)
    entry = check_type(WHOLE_FAILS)
    assert entry["status"] == "refused"
    assert entry["reason"].startswith(f"not validated (on {OWN_FORWARD}): self layer 0: "), entry["reason"]


class _Boxes(torch.nn.Module):
    """Attention that needs boxes no generic input makes: its projections run, then it fails."""

    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.k_proj = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, hidden_states, boxes):
        q, k = self.q_proj(hidden_states), self.k_proj(hidden_states)
        return (q @ k.mT) * boxes.sum()


class _Plain(_Boxes):
    def forward(self, hidden_states, attention_mask=None):
        return self.q_proj(hidden_states) @ self.k_proj(hidden_states).mT


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = PretrainedConfig()
        self.boxes, self.plain = _Boxes().double(), _Plain().double()


def _found(path: str) -> Found:
    return Found(path, "self", 0, "q_proj", "k_proj", 4, 2, 2, True, True, False)


def test_a_module_whose_own_forward_does_not_run_is_not_recorded():
    records, failures = drive(_Model(), [_found("boxes"), _found("plain")])
    assert set(failures) == {"boxes"} and "NoneType" in str(failures["boxes"])
    assert set(records) == {"plain"}
    record = records["plain"]
    assert record["x_q"].shape == (2, 7, 8) and record["q"].shape == (2, 7, 8)
    assert "q_attn" not in record  # outside the attention interface: only its projections are compared


class _Grid(torch.nn.Module):
    """SAM's windowed ViT attention in small: a fused qkv on a (B, H, W, C) grid, scores formed in place."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, hidden_states):
        batch, height, width, _ = hidden_states.shape
        qkv = self.qkv(hidden_states).reshape(batch, height * width, 3, 2, 4).permute(2, 0, 3, 1, 4)
        query, key, value = qkv.reshape(3, batch * 2, height * width, 4).unbind(0)
        return ((query * 0.5) @ key.transpose(-2, -1)).softmax(-1) @ value


def test_a_grid_module_is_driven_on_a_one_row_grid_and_checked_at_its_score_product():
    model = torch.nn.Module()
    model.config, model.grid = PretrainedConfig(), _Grid().double()
    item = replace(Found("grid", "self", 0, "qkv", "qkv", 4, 2, 2, True, True, False), fused="blocks")
    records, failures = drive(model, [item])
    assert not failures, failures
    record = records["grid"]
    assert record["x_q"].shape == (2, 1, 7, 8)  # (batch, 1, length) after (batch, length) failed
    q, k = record["q"].reshape(2, 7, 3, 2, 4).permute(2, 0, 3, 1, 4)[:2]  # [q | k | v] rows, by head
    assert torch.allclose(record["q_attn"], 0.5 * q) and torch.allclose(record["k_attn"], k)


def test_the_support_table_marks_and_counts_types_validated_on_their_modules(monkeypatch):
    entries = dict(conformance())
    name = next(t for t, e in sorted(entries.items()) if e["status"] == "validated" and t not in REGISTRY)
    before = support.counts()
    entries[name] = entries[name] | {"own_forward": entries[name]["stacks"]}
    monkeypatch.setattr(support, "conformance", lambda: entries)
    after, table = support.counts(), support.support_table()
    assert after == before | {"modules": before["modules"] + 1}
    assert f"| `{name}` | discovered (modules) |" in table
    assert (
        f"{after['modules']} of them with stacks validated on their attention modules' own forward" in table
    )


def test_a_type_whose_attention_modules_do_not_run_on_their_own_stays_refused(monkeypatch):
    from transformers.models.video_llama_3 import modeling_video_llama_3 as family

    attention = family.VideoLlama3VisionAttention
    real = attention.forward

    def forward(self, hidden_states, cu_seqlens, position_embeddings, boxes, **kwargs):
        boxes.any()  # an input no generic driver makes: None fails here, before q and k
        return real(self, hidden_states, cu_seqlens, position_embeddings, **kwargs)

    monkeypatch.setattr(attention, "forward", forward)
    entry = check_type("video_llama_3_vision")  # its whole forward fails too: the same missing input
    assert entry["status"] == "refused"
    assert entry["reason"].startswith("could not run the tiny model (TypeError: "), entry["reason"]
    assert "nor did encoder.layers.0.self_attn's own forward run (AttributeError: " in entry["reason"]
