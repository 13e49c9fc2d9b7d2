"""Discovery and the generated conformance: layouts read off the model, checked against its forward pass.

``src/attngeom/architectures/support.json`` is written by ``python -m attngeom.conformance.run`` (or
``attngeom support-table --conformance``). The default run checks a fixed subset of model types against a
fresh run; the whole run (every model type of the installed transformers) is ``slow`` and runs in CI.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from transformers import AutoConfig

from attngeom.architectures import ArchitectureError, architecture_for
from attngeom.architectures.discovery.attention import Found, Skipped, find_attention, meta_model
from attngeom.architectures.discovery.discovered import discover
from attngeom.architectures.discovery.validated import conformance
from attngeom.architectures.support import counts
from attngeom.conformance.check import randomized
from attngeom.conformance.run import all_model_types
from attngeom.conformance.tiny import tiny_config
from attngeom.engine import score

SUBSET = (
    "apertus",  # separate q/k with per-head RMS norms
    "lfm2",  # attention with q/k layernorms (RMS)
    "bamba",  # hybrid: Mamba layers unscored
    "mistral3",  # composite, saved under transformers' legacy names (language_model.model.*)
    "qwen3_5_text",  # gated queries ([q_h | gate_h] per head) and linear-attention layers
    "deepseek_v32",  # MLA
    "bit",  # convolutional: no dot-product attention
    "blt_patcher",  # a sub-config
    "llama",  # a hand-written table
    "recurrent_gemma",  # attention every third layer (the tiny depth grows to hold one); its own rotary
    "deformable_detr",  # a timm ResNet backbone replaced by transformers' own; frozen batch norms
)
"""Model types whose committed entries a fresh run must reproduce in the default test run."""

NAMED = (
    "gpt_oss qwen3_5 qwen3_5_text qwen3_next qwen3_vl ernie4_5 olmo3 glm4_moe minimax seed_oss gemma3n gemma4 "
    "deepseek_v32 exaone4_5 ministral3 mistral3 lfm2 hunyuan_v1_dense apertus arcee smolvlm internvl idefics2 "
    "idefics3 granitemoehybrid nemotron_h falcon_h1"
).split()
"""The families issue 22 names: each scored, or refused with a reason."""


@pytest.mark.conformance(*SUBSET)
def test_committed_support_file_matches_a_fresh_run_for_a_subset(fresh_conformance):
    committed = conformance()
    for model_type in SUBSET:
        assert fresh_conformance[model_type] == committed[model_type], model_type


@pytest.mark.slow
@pytest.mark.conformance(*all_model_types())  # the session's one run then holds every type
def test_committed_support_file_matches_a_fresh_run_of_every_model_type(fresh_conformance):
    """Every entry as committed, but those that ran out of time on either machine (a slow machine's
    verdict, not the model's; at most 5% of the types); no type's layers repeat a record key."""
    types = all_model_types()
    fresh = fresh_conformance
    committed = conformance()
    assert sorted(committed) == types
    timed_out = {t for t in types if "TimeoutError" in fresh[t]["reason"] + committed[t]["reason"]}
    assert len(timed_out) <= len(types) // 20, f"{len(timed_out)} types timed out: {sorted(timed_out)[:5]}"
    repeated = [t for t in types if "record key" in fresh[t]["reason"]]
    assert not repeated, f"(stack, layer) record keys repeat in {repeated}"
    differ = [t for t in types if t not in timed_out and fresh[t] != committed[t]]
    assert not differ, (
        f"{len(differ)} entries differ, e.g. {differ[:5]}: rerun attngeom support-table --conformance"
    )


def test_named_families_are_scored_or_refused_with_a_reason():
    entries = conformance()
    for model_type in NAMED:
        entry = entries[model_type]
        assert entry["status"] in ("table", "validated", "refused"), model_type
        assert entry["status"] != "refused" or len(entry["reason"]) > 20, model_type


def test_counts_partition_every_model_type():
    c = counts()
    entries = conformance()
    refused = sum(e["status"] == "refused" for e in entries.values())
    assert c["scored"] + refused == c["total"] and c["table"] + c["discovered"] == c["scored"]
    assert c["scored"] <= c["attention"] <= c["total"]


def test_discovery_finds_hybrid_layers_and_norms():
    for model_type, mixer in (("qwen3_5_text", "GatedDeltaNet"), ("bamba", "Mixer")):
        config = tiny_config(model_type)
        items = find_attention(meta_model(config), config)
        attention = [i for i in items if isinstance(i, Found)]
        unscored = [i for i in items if isinstance(i, Skipped)]
        assert attention and unscored and all(mixer in i.mixer for i in unscored), model_type
        assert sorted(i.layer for i in items) == list(range(config.num_hidden_layers))
    config = tiny_config("lfm2")
    attention = [i for i in find_attention(meta_model(config), config) if isinstance(i, Found)]
    assert attention and all(i.q_norm.name == "q_layernorm" and not i.q_norm.centre for i in attention)


def test_gated_query_keeps_the_query_half_of_each_head():
    config = tiny_config("qwen3_5_text")
    found = [i for i in find_attention(meta_model(config), config) if isinstance(i, Found)]
    assert found and all(i.gated and i.n_heads == config.num_attention_heads for i in found)


def test_a_discovered_type_scores_end_to_end(tmp_path):
    from transformers import AutoModel

    assert conformance()["lfm2"]["status"] == "validated"
    config = tiny_config("lfm2")
    randomized(AutoModel.from_config(config)).float().save_pretrained(tmp_path)
    frame = score(tmp_path, progress=False)
    scored = frame[frame["not_scored"].isna()]
    assert len(scored) and (scored["form"].str.startswith("qk_norm")).all()
    assert set(frame["layer"]) == set(range(config.num_hidden_layers))


def test_a_discovered_hybrid_records_its_other_layers(tmp_path):
    from transformers import AutoModel

    assert conformance()["bamba"]["status"] == "validated"
    config = tiny_config("bamba")
    randomized(AutoModel.from_config(config)).float().save_pretrained(tmp_path)
    frame = score(tmp_path, progress=False)
    reasons = frame["not_scored"].dropna()
    assert len(reasons) and reasons.str.contains("BambaMixer: not a dot-product attention").all()
    assert frame[frame["not_scored"].isna()]["layer"].unique().tolist() == [1]


def test_the_refusal_is_one_short_line_with_the_reason_and_nearest_types():
    config = AutoConfig.for_model("mamba")
    with pytest.raises(ArchitectureError) as raised:
        architecture_for(config)
    message = str(raised.value)
    assert "no dot-product attention" in message and "support table" in message
    assert len(message) < 400 and "\n" not in message

    class Unknown:
        model_type = "llama5"

    with pytest.raises(ArchitectureError, match=r"nearest supported: .*llama.*support table"):
        architecture_for(Unknown())


def test_discovery_refuses_a_model_without_attention():
    with pytest.raises(ArchitectureError, match="no attention module"):
        discover(tiny_config("mamba"))


def test_rms_norm_probe_tells_gain_offsets_apart():
    from attngeom.architectures.qk_norms import probe_norm

    gemma = tiny_config("gemma3_text")
    llama_like = tiny_config("qwen3")
    norms = []
    for config in (gemma, llama_like):
        module = next(m for m in meta_model(config).modules() if hasattr(m, "q_norm"))
        norms.append(probe_norm(module.q_norm, "q_norm"))
    assert [n.offset for n in norms] == [1.0, 0.0] and not any(n.centre for n in norms)
    layer_norm = probe_norm(torch.nn.LayerNorm(8), "q_norm")
    assert layer_norm.centre and layer_norm.bias and layer_norm.offset == 0.0


def test_a_latent_attention_whose_query_reads_more_than_its_latent_is_refused():
    """AXK2's query projection reads the normalised and the raw query latent together: no form; a
    DeepSeek-V3 latent attention (q_b_proj of the latent alone) is found."""
    with pytest.raises(ArchitectureError, match="no q_b_proj maps the 32-wide query latent alone"):
        find_attention(meta_model(tiny_config("axk2")), tiny_config("axk2"))
    config = tiny_config("deepseek_v3")
    found = [i for i in find_attention(meta_model(config), config) if isinstance(i, Found)]
    assert found and all(i.latent and i.q.endswith("q_a_proj") for i in found)


def test_a_query_temperature_is_left_out_and_neutralised_and_a_wrong_discovery_still_fails(monkeypatch):
    """Mistral Large 4 rescales each head's q by its position (a learned ``log(pos + 1)`` temperature):
    left out of the form and neutralised in the check as rotary is; a discovery that misses it fails."""
    import attngeom.architectures.discovery.attention as discovery_module
    import attngeom.architectures.discovery.discovered as discovered_module
    from attngeom.conformance.run import check_type

    config = tiny_config("mistral_large4_text")
    found = [i for i in find_attention(meta_model(config), config) if isinstance(i, Found)]
    assert found and all(i.temperature == "softmax_scaling" for i in found)
    assert check_type("mistral_large4_text")["status"] == "validated"
    real = discovery_module.find_attention

    def missed(model, config, layout="", observed=None):
        return [
            replace(i, temperature="") if isinstance(i, Found) else i
            for i in real(model, config, layout, observed)
        ]

    monkeypatch.setattr(discovery_module, "find_attention", missed)
    monkeypatch.setattr(discovered_module, "find_attention", missed)
    entry = check_type("mistral_large4_text")
    assert entry["status"] == "refused" and "positive multiple" in entry["reason"], entry["reason"]


def test_a_gated_recurrence_with_q_and_k_is_no_dot_product_attention():
    """xLSTM's mLSTM forms q·k but weights it by exponential gates and normalises by their sum (no
    softmax): skipped by discovery and refused as no dot-product attention; a softmax model is not."""
    from attngeom.architectures.discovery.recurrence import recurrence_reason
    from attngeom.conformance.run import _no_attention_reason

    config = tiny_config("xlstm")
    model = meta_model(config)
    assert not [i for i in find_attention(model, config) if isinstance(i, Found)]
    assert _no_attention_reason(model).startswith("no dot-product attention (gated recurrence xLSTMLayer")
    assert recurrence_reason(meta_model(tiny_config("llama"))) is None


def test_norms_of_the_projections_input_are_not_folded_as_q_k_norms():
    """BLT's cross attention normalises its hidden states before q_proj/k_proj (norms as wide as their
    input, not as k): input norms, left out as a layer's input norm is; Qwen3's q/k norms are folded."""
    config = tiny_config("blt")
    found = [i for i in find_attention(meta_model(config), config) if isinstance(i, Found)]
    cross = [i for i in found if "cross_attn" in i.path]
    assert cross and all(i.q_norm is None and i.k_norm is None for i in cross)
    qwen = tiny_config("qwen3")
    assert all(i.q_norm is not None for i in find_attention(meta_model(qwen), qwen) if isinstance(i, Found))


def test_scores_summing_a_second_q_k_form_are_refused_but_position_terms_are_not():
    """LiLT adds layout_query·layout_key (its layout stream) to query·key: refused, since discovery
    reads one form; SEW-D's relative-position pair (pos_query_proj/pos_key_proj) is a position term."""
    from transformers import AutoConfig

    with pytest.raises(ArchitectureError, match="second q·k form .`layout_query`·`layout_key`"):
        discover(tiny_config("lilt"))
    from attngeom.conformance.run import check_type

    assert check_type("lilt")["reason"].startswith("LiltSelfAttention: its scores add a second q·k form")
    config = AutoConfig.for_model("sew-d", share_att_key=False, **{"num_hidden_layers": 1})
    found = [i for i in find_attention(meta_model(config), config) if isinstance(i, Found)]
    assert found


def test_a_module_without_a_head_width_is_unscored_beside_scored_attention(monkeypatch):
    """GroupViT's token assignment (q/k projections, no head count or width) is an unscored layer beside
    the scored towers and named in the notes; a model whose only q/k module has none is still refused."""
    import attngeom.architectures.discovery.attention as discovery_module
    from attngeom.architectures.discovery.attention import HEADLESS

    config = tiny_config("groupvit")
    items = find_attention(meta_model(config), config)
    headless = [i for i in items if isinstance(i, Skipped) and i.why == HEADLESS]
    assert headless and {i.mixer for i in headless} == {"GroupViTAssignAttention"}
    assignment = {i.stack for i in headless}  # no other mixer recorded where no layer of a stack scores
    assert not [i for i in items if isinstance(i, Skipped) and i.stack in assignment and i.why != HEADLESS]
    assert any(isinstance(i, Found) for i in items)
    assert "not scored: GroupViTAssignAttention (no head width to read)" in discover(config).notes
    config = tiny_config("xlstm")  # its mLSTM, were it not a gated recurrence (no dot-product attention)
    monkeypatch.setattr(discovery_module, "recurrent", lambda module: False)
    with pytest.raises(ArchitectureError, match=HEADLESS):
        find_attention(meta_model(config), config)


def test_a_module_that_outputs_its_scores_is_an_unscored_pairwise_scorer():
    """PP-DocLayout's reading-order pointers (q and k projections, no value or output projection: their
    q·k scores, one of them antisymmetrised, are the output) are unscored beside the model's attention."""
    from attngeom.architectures.discovery.attention import SCORER

    config = tiny_config("pp_doclayout_v4")
    items = find_attention(meta_model(config), config)
    scorers = [i for i in items if isinstance(i, Skipped) and i.why == SCORER]
    assert {i.mixer for i in scorers} == {"PPDocLayoutV4GlobalPointer"} and len(scorers) == 2
    assert {i.stack for i in items if isinstance(i, Found)} == {"encoder_aifi", "decoder"}
    assert f"PPDocLayoutV4GlobalPointer ({SCORER})" in discover(config).notes


def test_a_norm_with_a_gain_per_head_is_read_only_when_it_normalises_each_head():
    """Chameleon's q/k LayerNorm has a (heads × head width) gain over per-head statistics: folded per
    head. A LayerNorm over all heads with the same gain shape is not a per-head norm: not read."""
    from transformers.models.chameleon.modeling_chameleon import ChameleonLayerNorm

    from attngeom.architectures.qk_norms import probe_norm

    per_head = probe_norm(ChameleonLayerNorm((4, 16)), "q_norm")
    assert per_head is not None and per_head.centre and per_head.offset == 0.0
    assert probe_norm(torch.nn.LayerNorm((4, 16)), "q_norm") is None


def test_a_base_model_built_from_a_sub_config_gives_way_to_the_whole_models_class():
    import transformers

    from attngeom.architectures.discovery.attention import model_class

    assert model_class("musicgen_melody") is transformers.MusicgenMelodyForConditionalGeneration
    assert model_class("llama") is transformers.AutoModel
    assert (
        model_class("evolla") is transformers.EvollaModel
    )  # AutoModel resolves its config class to no model
    meta_model(tiny_config("musicgen_melody"))  # its base model (the decoder) reads `num_codebooks`


def test_a_latent_attentions_rotary_key_norm_is_folded_and_needed(monkeypatch):
    """Dots 3 normalises its shared rotary key on its own: validated with the norm's gain folded into the
    rotary key projection, refused without it."""
    from attngeom.architectures.discovery import attention as discovery
    from attngeom.conformance.run import check_type

    assert check_type("dots3_note_text")["status"] == "validated"
    monkeypatch.setattr(discovery, "rope_key_norm", lambda module: None)
    refused = check_type("dots3_note_text")
    assert refused["status"] == "refused" and "_rope: q or k is not a positive multiple" in refused["reason"]
