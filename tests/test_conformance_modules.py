"""The conformance fallback: attention modules driven through their own forward where the whole tiny model's
forward pass does not run (``conformance/modules.py``). It must validate a right discovery, refuse a wrong
one, and never validate a module whose own forward did not run."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from transformers import PretrainedConfig

import attngeom.architectures.discovery.attention as discovery
import attngeom.architectures.discovery.discovered as discovered
from attngeom.architectures import REGISTRY, support
from attngeom.architectures.discovery.attention import Found
from attngeom.architectures.discovery.stacks import LONE
from attngeom.architectures.discovery.validated import conformance
from attngeom.conformance.entries import OWN_FORWARD
from attngeom.conformance.modules import drive
from attngeom.conformance.run import check_type

WHOLE_FAILS = "inkling2_vision"
"""Its whole forward takes each image token's block of patches as (tokens, p·m, p·m, channels), which the
generic inputs do not make; its attention modules (packed sequences, rotary embeddings) run on their own."""


def test_a_type_whose_whole_forward_fails_is_validated_on_its_modules_and_says_so():
    entry = check_type(WHOLE_FAILS)
    assert entry["status"] == "validated", entry["reason"]
    assert entry["own_forward"] == entry["stacks"] == [LONE[entry["objective"]]]
    assert OWN_FORWARD in entry["reason"] and "whole forward pass did not run" in entry["reason"]


def _wrong(change):
    real = discovery.find_attention

    def find_attention(model, config, layout="", observed=None):
        return [change(i) if isinstance(i, Found) else i for i in real(model, config, layout, observed)]

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
    assert entry["reason"].startswith(f"not validated (on {OWN_FORWARD}): encoder layer 0: "), entry["reason"]


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


@pytest.mark.parametrize("model_type", ["gpt_neox_japanese", "mgp-str"])
def test_a_fused_projection_outside_the_interface_is_checked_on_its_own_q_k_product(monkeypatch, model_type):
    """GPT-NeoX-Japanese (per-head rows, ``baddbmm``) and MGP-STR ([q | k | v] rows, ``q @ kᵀ``) split
    their fused projection themselves: the first product's operands confirm the layout; another fails."""
    entry = check_type(model_type)
    assert entry["status"] == "validated", entry["reason"]
    wrong = {"per_head": "blocks", "blocks": "per_head"}[entry["layout"]]
    swapped = _wrong(lambda i: replace(i, fused=wrong) if i.fused else i)
    monkeypatch.setattr(discovery, "find_attention", swapped)
    monkeypatch.setattr(discovered, "find_attention", swapped)
    monkeypatch.setattr("attngeom.conformance.run.LAYOUTS", (entry["layout"],))
    refused = check_type(model_type)
    lone = LONE[entry["objective"]]
    assert refused["status"] == "refused" and f"{lone} layer 0: q or k " in refused["reason"], refused


def test_a_module_reached_by_non_finite_states_is_checked_on_its_own_forward():
    """CANINE's float64 forward overflows its mask upstream (0 × -inf), so NaN reaches the deep encoder:
    those modules are driven on their own (``to_tensor`` is their key input), never compared on NaN."""
    entry = check_type("canine")
    assert entry["status"] == "validated", entry["reason"]
    assert "encoder" in entry["own_forward"] and "non-finite states reached" in entry["reason"]


def test_a_rotary_embedding_the_attention_computes_itself_is_neutralised(monkeypatch):
    """IDEFICS's attention makes its cos/sin with its own rotary child: neutralised as a passed one is
    (rotary is left out of the form), so the form's q and k are compared; a wrong discovery still fails."""
    entry = check_type("idefics")
    assert entry["status"] == "validated", entry["reason"]
    swapped = _wrong(lambda i: replace(i, q=i.k, k=i.q))
    monkeypatch.setattr(discovery, "find_attention", swapped)
    monkeypatch.setattr(discovered, "find_attention", swapped)
    assert check_type("idefics")["status"] == "refused"


def _switch_off_query_scale(monkeypatch):
    monkeypatch.setattr(discovery, "query_scale", lambda module, head_dim: "")


def _switch_off_zero_positions(monkeypatch):
    import attngeom.conformance.neutral as neutral

    monkeypatch.setattr(neutral, "POSITIONS", ())


@pytest.mark.parametrize(
    ("model_type", "switch_off", "note"),
    [
        pytest.param("timesfm", _switch_off_query_scale, "per-dimension scale", id="timesfm-query-scale"),
        pytest.param("vjepa2", _switch_off_zero_positions, "discovered", id="vjepa2-rotary-by-positions"),
    ],
)
def test_a_mechanism_validates_its_type_and_its_absence_fails_it(monkeypatch, model_type, switch_off, note):
    """TimesFM's learned query scale folded into W_q; V-JEPA 2's own rotary (from the positions it is
    handed) at position 0: each validates its type, and without it the same check refuses the type."""
    entry = check_type(model_type)
    assert entry["status"] == "validated" and note in entry["reason"], entry["reason"]
    switch_off(monkeypatch)
    entry = check_type(model_type)
    assert entry["status"] == "refused" and "differs from the form's projection" in entry["reason"], entry


def test_an_attention_that_casts_q_and_k_to_float32_runs_in_float64_and_a_wrong_discovery_fails_it(
    monkeypatch,
):
    """Gemma 4's audio attention casts q, k and v to float32 (``.float()``) and then scales q by a float64
    parameter: kept float64 (``neutral.float64_kept``), its tiny model runs and validates; without that
    q·kᵀ mixes float64 with float32 and the type is refused; a wrong discovery still fails it."""
    from attngeom.conformance.neutral import _Float64Kept

    entry = check_type("gemma4_audio")
    assert entry["status"] == "validated" and "per-dimension scale" in entry["reason"], entry["reason"]
    assert "own_forward" not in entry and entry["objective"] == "bidirectional", entry
    swapped = _wrong(lambda i: replace(i, q=i.k, k=i.q))
    with monkeypatch.context() as patched:
        patched.setattr(discovery, "find_attention", swapped)
        patched.setattr(discovered, "find_attention", swapped)
        assert check_type("gemma4_audio")["status"] == "refused"
    monkeypatch.setattr(  # switched off: every cast as the model makes it
        _Float64Kept,
        "__torch_function__",
        lambda self, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})),
    )
    entry = check_type("gemma4_audio")
    assert entry["status"] == "refused" and "expected scalar type Float but found Double" in entry["reason"]


class _PointBatch(torch.nn.Module):
    def __init__(self, config, attn: torch.nn.Module) -> None:
        super().__init__()
        self.config = config
        self.attn = attn.double()


def test_a_point_batch_attention_is_driven_with_its_point_axis_and_compared_token_by_token():
    """SAM 2's memory attention folds (batch, points) into its attention batch: a (batch, tokens) input
    would broadcast q against the rotary's shape (refused), a (batch, 1, tokens) one runs; the form's q·k
    then agrees token by token, and a swapped q/k does not."""
    from transformers import Sam2VideoConfig
    from transformers.models.sam2_video.modeling_sam2_video import Sam2VideoRoPEAttention

    config = Sam2VideoConfig()
    _check_point_batch(_PointBatch(config, Sam2VideoRoPEAttention(config)), cross=False)


def test_a_cross_attention_with_its_keys_own_rotary_and_a_repeat_count_is_driven():
    """EdgeTAM's memory cross-attention takes its keys' rotary (``position_embeddings_k``, neutral like
    the queries') and a repeat count it divides by (default 0: tried at 1); a negated k fails."""
    from transformers import EdgeTamVideoConfig
    from transformers.models.edgetam_video.modeling_edgetam_video import EdgeTamVideoRoPECrossAttention

    config = EdgeTamVideoConfig()
    _check_point_batch(_PointBatch(config, EdgeTamVideoRoPECrossAttention(config, kv_in_dim=64)), cross=True)


def _check_point_batch(model: _PointBatch, cross: bool) -> None:
    from attngeom.conformance.check import compare

    attn = model.attn
    heads, width = attn.num_attention_heads, attn.head_dim
    item = Found("attn", "memory_attention", 0, "q_proj", "k_proj", width, heads, heads, True, True, cross)
    records, failures = drive(model, [item])
    assert not failures, failures
    record = records["attn"]
    assert record["x_q"].shape[:3] == (2, 1, 7) and record["q_attn"].shape == (2, heads, 7, width)

    def layer(q, k):
        return SimpleNamespace(
            w_q=q.weight.T, w_k=k.weight.T, b_q=q.bias, b_k=k.bias, n_heads=heads, n_kv_heads=heads,
            head_dim=width, form="standard",
        )  # fmt: skip

    assert compare(layer(attn.q_proj, attn.k_proj), record) is None
    swapped = (attn.k_proj, attn.q_proj) if not cross else (attn.q_proj, _negated(attn.k_proj))
    assert compare(layer(*swapped), record)


def _negated(projection: torch.nn.Linear) -> SimpleNamespace:
    return SimpleNamespace(weight=-projection.weight, bias=-projection.bias)


def test_a_latent_attention_driven_on_its_own_is_not_taken_for_a_broadcast_query():
    """LongCat-Flash's whole forward does not run; its latent attentions run on their own, where q (heads ×
    head width) holds more values than the low-rank q_a_proj gave by construction, not by a broadcast."""
    entry = check_type("longcat_flash")
    assert entry["status"] == "validated" and entry["own_forward"] == ["decoder"], entry["reason"]
