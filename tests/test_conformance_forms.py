"""Forms and labels from what a tiny model's forward pass shows, not from module names (issue 29).

A form is self (with a symmetry) only where its queries and keys were seen reading one input at the same
positions; otherwise it is a cross form, whatever the module is called. No (stack, layer) record key
repeats. The objective comes from what the attention computed and the model's documented tasks, the modality
from its inputs, and a type whose base model has no attention is judged on its checkpoint classes.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel, PvtV2Config

import attngeom.architectures.registry as registry
from attngeom.architectures.discovery.attention import Found, find_attention, meta_model
from attngeom.architectures.discovery.observed import Observed
from attngeom.architectures.discovery.stacks import place
from attngeom.architectures.discovery.validated import conformance
from attngeom.conformance.observe import MERGED, OTHER, SELF, causal, reading
from attngeom.conformance.run import check_type
from attngeom.conformance.tiny import tiny_config
from attngeom.engine import score

FORMS = ("pvt_v2", "pvt", "glpn", "blt", "pix2struct", "emu3")
"""The types issue 29 found with a wrong form or repeated record keys."""
ROLES = {
    "vipllava": ("multimodal", "autoregressive"),  # a vision tower beside a causal language model
    "voxtral": ("multimodal", "autoregressive"),  # an audio tower beside a causal language model
    "altclip": ("multimodal", "bidirectional"),  # a dual encoder: bidirectional text and vision
    "pix2struct": ("vision", "encoder-decoder"),  # image patches in, a causal decoder reading them
    "glm4v_vision": ("vision", "bidirectional"),  # a vision tower fed flattened patches
    "xmod": ("language", "bidirectional"),  # an encoder with a ...ForCausalLM head: its masks are not causal
}
"""Types of each kind of multimodal family, and a language encoder: (modality, objective)."""
OCR = ("pp_ocrv5_mobile_rec", "pp_ocrv5_server_rec", "pp_ocrv6_small_rec")
"""Text recognisers whose base model is a convolutional backbone and whose checkpoint class has attention."""


TOWERS = {
    "clip": "text_model_encoder",
    "owlv2": "text_model_encoder",
    "groupvit": "text_model_encoder",
    "xclip": "text_model_encoder",
    "aimv2": None,
    "videoprism": None,
}
"""Dual encoders (documented to compare embeddings): ``bidirectional`` whether their text tower is causal
(that stack is named in ``causal_stacks``) or not."""
MULTIMODAL = (
    "idefics florence2 udop vilt layoutlmv3 granite_speech kyutai_speech_to_text vibevoice_asr grounding-dino"
).split()
"""Models reading text beside an image or a recording (issue 41)."""
NOT_FLAGS = {"bridgetower": "bidirectional", "lightglue": "bidirectional", "fsmt": "encoder-decoder"}
"""Types whose objective an is_causal flag or a cached forward pass got wrong."""


pytestmark = pytest.mark.conformance(*FORMS, *ROLES, *OCR, *TOWERS, *MULTIMODAL, *NOT_FLAGS)


@pytest.fixture(scope="module")
def entries(fresh_conformance) -> dict[str, dict]:
    return fresh_conformance


def keys(layers) -> list[tuple[str, int]]:
    return [(layer.stack, layer.layer) for layer in layers]


@pytest.mark.parametrize("model_type", ["pvt_v2", "pvt", "glpn"])
def test_spatially_reduced_keys_are_a_cross_form_and_the_last_stage_self(entries, model_type):
    """The keys of a stage with a reduction ratio above 1 read LayerNorm(Conv(x)), not x."""
    entry = entries[model_type]
    assert entry["status"] == "validated" and entry["stacks"] == ["encoder_cross", "encoder"], entry
    (crossed,) = entry["cross"]
    (kept,) = entry["self_kinds"]
    assert "reduction" in crossed or ",sr," in crossed, crossed
    assert "reduction" not in kept and ",sr," not in kept, kept


def test_a_pvt_v2_b2_has_13_cross_layers_of_16_and_its_records_no_symmetry_there(entries, monkeypatch):
    """The observation carries over to any depth: PVTv2-b2's stages of 3, 4, 6, 3 blocks with reduction
    ratios 8, 4, 2, 1; every record key is distinct and only the last stage has a symmetry."""
    observed = Observed.of(entries["pvt_v2"])
    config = PvtV2Config(depths=[3, 4, 6, 3])
    items = [i for i in find_attention(meta_model(config), config, "", observed) if isinstance(i, Found)]
    assert [i.cross for i in items] == [True] * 13 + [False] * 3
    small = PvtV2Config(depths=[2, 1, 1, 1], hidden_sizes=[16, 16, 16, 16], num_attention_heads=[1, 1, 1, 1])
    model = AutoModel.from_config(small).eval()
    monkeypatch.setattr(registry, "conformance", lambda: {"pvt_v2": entries["pvt_v2"]})
    frame = score(model, progress=False)
    assert not frame.duplicated(["stack", "layer", "head"]).any()
    crossed = frame[frame["stack"] == "encoder_cross"]
    assert sorted(crossed["layer"].unique()) == [0, 1, 2, 3] and crossed["symmetry"].isna().all()
    assert frame[frame["stack"] == "encoder"]["symmetry"].notna().all()


def test_blt_cross_attention_layers_are_cross_and_its_self_attention_is_not(entries):
    stacks = entries["blt"]["stacks"]
    assert [s for s in stacks if "cross_attn_layers" in s] == [
        "local_encoder_cross_attn_layers_cross",
        "local_decoder_cross_attn_layers_cross",
    ]
    assert {"local_encoder", "global_transformer", "local_decoder", "patcher"} <= set(stacks)


def test_pix2struct_decoder_self_and_cross_attention_are_two_stacks(entries):
    entry = entries["pix2struct"]
    assert entry["stacks"] == ["encoder_encoder", "decoder", "decoder_cross"]
    assert entry["cross"] == ["decoder.layer.{}.encoder_decoder_attention.attention"]
    assert "own_forward" not in entry  # its whole forward runs on flattened patches


def test_emu3_vq_attention_blocks_have_a_layer_each(entries):
    """``down.3.attn.0`` and ``down.3.attn.1`` were both layer 3 of one stack."""
    config = tiny_config("emu3")
    found = find_attention(meta_model(config), config, "", Observed.of(entries["emu3"]))
    down = [i.layer for i in found if i.stack == "vqmodel_encoder_down_block_down"]
    assert down == list(range(len(down))) and len(down) > 1, down
    assert len({(i.stack, i.layer) for i in found}) == len(found)


@pytest.mark.parametrize("model_type", FORMS)
def test_no_record_key_repeats_in_the_named_types(entries, model_type):
    """What the engine records of a validated type is keyed by (stack, layer, head); the run refuses a
    type whose layers repeat a (stack, layer) key, so a validated entry has none."""
    assert entries[model_type]["status"] == "validated", entries[model_type]["reason"]


def test_no_record_key_repeats_over_the_committed_conformance_run():
    repeated = [t for t, e in conformance().items() if "record key" in e["reason"]]
    assert not repeated, repeated


def test_a_repeated_record_key_is_refused(monkeypatch):
    """The run's guard can fail: layer indices that all read 0 repeat a key."""
    import attngeom.architectures.discovery.stacks as stacks

    monkeypatch.setattr(stacks, "_indices", lambda paths: [0] * len(paths))
    entry = check_type("apertus")
    assert entry["status"] == "refused" and "record key ('self', 0) repeats" in entry["reason"], entry


def test_stack_names_and_layers_are_unique_by_construction():
    model = nn.Module()
    model.a = nn.ModuleList(nn.Module() for _ in range(2))
    for block in model.a:
        block.self_attention, block.cross_attention = nn.Module(), nn.Module()
        block.self_attention.attention, block.cross_attention.attention = nn.Module(), nn.Module()
        block.stages = nn.ModuleList(nn.ModuleList(nn.Module() for _ in range(2)) for _ in range(2))
    paths = [f"a.{i}.{n}.attention" for i in range(2) for n in ("self_attention", "cross_attention")]
    paths += [f"a.0.stages.{s}.{b}" for s in range(2) for b in range(2)]
    placed, _, order = place(model, paths, [False, True, False, True] + [False] * 4)
    assert order == ["a_self_attention_attention", "a_cross", "a_stages"]
    assert len({(p.stack, p.layer) for p in placed}) == len(placed)
    assert [p.layer for p in placed[4:]] == [0, 1, 2, 3]  # stage and block both vary: counted in order
    same, _, _ = place(model, paths[:4], [True] * 4)
    assert {p.stack for p in same} == {"a_self_attention_cross", "a_cross_attention_cross"}


class ConvKeysConfig(PretrainedConfig):
    model_type = "attngeom_conv_keys"

    def __init__(
        self, hidden_size=32, num_attention_heads=4, num_hidden_layers=2, vocab_size=40, convolved=True, **kw
    ):
        super().__init__(**kw)
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.num_hidden_layers, self.vocab_size, self.convolved = num_hidden_layers, vocab_size, convolved


class SelfAttn(nn.Module):
    """Named a self-attention; with ``convolved``, its keys read a convolution of its input over tokens."""

    def __init__(self, config):
        super().__init__()
        width, self.heads = config.hidden_size, config.num_attention_heads
        self.head_dim = width // self.heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(width, width) for _ in range(4))
        self.mix = nn.Conv1d(width, width, 3, padding=1, groups=width) if config.convolved else nn.Identity()

    def forward(self, x):
        batch, n, width = x.shape

        def heads(t):
            return t.view(batch, -1, self.heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(self.mix(x.mT).mT)), heads(self.v_proj(x))
        weights = (q @ k.mT / self.head_dim**0.5).softmax(-1)
        return self.o_proj((weights @ v).transpose(1, 2).reshape(batch, n, width))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self_attn = SelfAttn(config)

    def forward(self, x):
        return x + self.self_attn(x)


class ConvKeysModel(PreTrainedModel):
    config_class = ConvKeysConfig

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
def conv_keys():
    AutoConfig.register(ConvKeysConfig.model_type, ConvKeysConfig, exist_ok=True)
    AutoModel.register(ConvKeysConfig, ConvKeysModel, exist_ok=True)
    return ConvKeysConfig.model_type


@pytest.mark.parametrize("convolved", [True, False])
def test_a_self_attn_whose_keys_read_a_convolution_of_its_input_is_a_cross_form(
    conv_keys, monkeypatch, convolved
):
    import attngeom.conformance.tiny as tiny

    monkeypatch.setattr(tiny, "tiny_config", lambda t: ConvKeysConfig(convolved=convolved))
    entry = check_type(conv_keys)
    assert entry["status"] == "validated", entry
    assert entry["stacks"] == (["encoder_cross"] if convolved else ["encoder"])  # one template, by objective
    config = ConvKeysConfig(convolved=convolved)
    model = ConvKeysModel(config).eval()
    monkeypatch.setattr(registry, "conformance", lambda: {conv_keys: entry})
    frame = score(model, progress=False)
    assert frame["symmetry"].isna().all() == convolved and frame["directionality"].notna().all()


def test_what_the_keys_read_is_told_by_their_values_not_their_shape():
    x = torch.randn(2, 5, 8)
    assert reading(x, x.clone()) == SELF
    assert reading(x, torch.cat([x, torch.randn(2, 3, 8)], 1)) == MERGED
    assert reading(x, x + 1e-3) == OTHER  # same shape, other values: another input
    assert reading(x, x[:, :3]) == OTHER  # fewer tokens (a spatial reduction)
    assert reading(x, torch.cat([torch.randn(2, 3, 8), x], 1)) == MERGED  # after other tokens
    assert reading(x, torch.cat([x[:, :2], torch.randn(2, 3, 8), x[:, 2:]], 1)) == OTHER  # split apart


def test_attention_is_causal_when_the_first_query_puts_nothing_on_a_later_key():
    lower = torch.ones(4, 4, dtype=torch.float64).tril()
    assert causal((lower / lower.sum(-1, keepdim=True))[None, None])
    assert not causal(torch.full((1, 1, 4, 4), 0.25, dtype=torch.float64))
    images = lower.clone()
    images[2:, 2:] = 1.0  # image tokens that see each other after causal text
    assert causal((images / images.sum(-1, keepdim=True))[None, None])
    assert not causal(torch.ones(1, 1, 1, 4, dtype=torch.float64))  # one query sees no other token
    merged = torch.cat([lower, torch.ones(4, 3, dtype=torch.float64)], -1)  # and the encoder's tokens after
    assert causal((merged / merged.sum(-1, keepdim=True))[None, None])


@pytest.mark.parametrize("model_type", ROLES)
def test_roles_and_modalities_come_from_the_forward_pass(entries, model_type):
    entry = entries[model_type]
    assert entry["status"] == "validated", entry["reason"]
    assert (entry["modality"], entry["objective"]) == ROLES[model_type]


def test_causal_attention_makes_an_encoder_autoregressive_and_its_absence_bidirectional(monkeypatch):
    """The objective follows what the attention did, not the model's class: every attention seen causal
    makes the same encoder (documented with a causal LM head too) autoregressive."""
    import attngeom.conformance.interface as interface
    import attngeom.conformance.masks as masks

    assert check_type("xmod")["objective"] == "bidirectional"
    monkeypatch.setattr(interface, "causal", lambda probabilities: True)
    monkeypatch.setattr(masks, "causal", lambda probabilities: True)
    assert check_type("xmod")["objective"] == "autoregressive"


@pytest.mark.parametrize("model_type", TOWERS)
def test_dual_encoders_are_bidirectional_and_their_causal_towers_are_labelled(entries, model_type):
    entry = entries[model_type]
    assert entry["status"] == "validated", entry["reason"]
    assert (entry["modality"], entry["objective"]) == ("multimodal", "bidirectional")
    causal_tower = TOWERS[model_type]
    assert (causal_tower in entry.get("causal_stacks", [])) if causal_tower else True, entry


@pytest.mark.parametrize("model_type", MULTIMODAL)
def test_models_reading_text_beside_an_image_or_a_recording_are_multimodal(entries, model_type):
    entry = entries[model_type]
    assert entry["status"] == "validated" and entry["modality"] == "multimodal", entry


@pytest.mark.parametrize("model_type", NOT_FLAGS)
def test_objectives_come_from_what_the_attention_computed(entries, model_type):
    entry = entries[model_type]
    assert entry["status"] == "validated" and entry["objective"] == NOT_FLAGS[model_type], entry


@pytest.mark.parametrize("model_type", OCR)
def test_text_recognisers_are_judged_on_their_checkpoint_class(entries, model_type):
    """Their base model is a convolutional backbone; the class their checkpoints are saved from has
    multi-head self-attention in its head, which is what is scored."""
    entry = entries[model_type]
    assert entry["status"] == "validated", entry["reason"]
    assert entry["model_class"].endswith("ForTextRecognition"), entry
