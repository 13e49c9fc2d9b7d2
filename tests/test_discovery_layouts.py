"""Discovery's layouts and the conformance check's comparisons, each run on a tiny random model.

The named families of issue 22 run through the generated conformance here (not read from the committed
``support.json``): each must end scored, or refused for a reason about the model, never because the
generic tiny config or inputs did not suit it.
"""

from __future__ import annotations

import tempfile
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModel

from attngeom.architectures.discovery.attention import Found, Skipped, find_attention, meta_model
from attngeom.architectures.discovery.discovered import discover
from attngeom.conformance.check import UNSEEN, capture, compare, randomized
from attngeom.conformance.run import open_source_for
from attngeom.conformance.tiny import tiny_config

NAMED = (
    "gpt_oss qwen3_5 qwen3_5_text qwen3_next qwen3_vl ernie4_5 olmo3 glm4_moe minimax seed_oss gemma3n gemma4 "
    "deepseek_v32 exaone4_5 ministral3 mistral3 lfm2 hunyuan_v1_dense apertus arcee smolvlm internvl idefics2 "
    "idefics3 granitemoehybrid nemotron_h falcon_h1 jamba bamba zamba zamba2 kimi_linear"
).split()
"""The families issue 22 names (Jamba, Bamba, Zamba, Kimi-Linear by their model types)."""

LAYOUTS = {
    "gte": "a fused qkv_proj checkpoint, chunked by transformers' loading rules",
    "jina_embeddings_v3": "a fused Wqkv checkpoint under other module names",
    "gpt-sw3": "a Conv1D c_attn (x W convention) with [q | k | v] columns",
    "fuyu": "a per-head fused projection with centring q/k LayerNorms and their biases",
    "mlcd": "rotary embeddings handed over as a list",
    "pegasus_x": "padded (zero) rows in a block-local attention",
    "t5gemma2": "merged self- and cross-attention keys from one projection",
    "sam3_vit_model": "grid-shaped inputs and rotary passed by position",
    "sam_vision_model": "a fused qkv outside the attention interface, windows padded (q, k at the score product)",
    "muse_spark_text": "a shared q/k norm without a gain",
    "deepseek_v32": "latent attention whose interleaved rotary part permutes head dims",
    "glm5_next_text": "latent attention without a rotary part, beside linear-attention layers",
    "kimi_linear": "delta-rule linear-attention layers beside latent attention",
    "granitemoehybrid": "a hybrid whose default has no attention layer",
    "moshi": "q/k projections wrapping their nn.Linear as `linear`, rotary computed inside the attention",
    "gemma4_vision": "clippable linear wrappers; flattened patches with their (x, y) positions",
    "ibert": "quantised linear layers returning (output, scale)",
    "squeezebert": "grouped pointwise Conv1d projections, channels first",
    "cpmant": "project_q / project_k projections",
    "bark": "a fused att_proj outside the attention interface, checked at its score product",
    "parakeet_encoder": "a relative-position attention adding its content bias u to every query",
    "esmc": "LayerNorms over the whole q and k projections (centring all heads together)",
    "granite_speech5_encoder": "a model grouping kv heads by a count its projections do not use",
}
"""Types that each exercise one case of discovery or of the check, and must validate."""


@pytest.mark.slow  # 32 types: read from the slow run of every type, in CI's slow step
@pytest.mark.conformance(*NAMED)
def test_named_families_are_scored_or_refused_for_a_reason_about_the_model(fresh_conformance):
    results = {t: fresh_conformance[t] for t in NAMED}
    unsuited = {
        t: r["reason"]
        for t, r in results.items()
        if r["status"] == "refused" and r["reason"].startswith(("could not build", "could not run"))
    }
    assert not unsuited, f"{len(unsuited)} named families not checked: {unsuited}"
    assert all(r["status"] in ("table", "validated") or len(r["reason"]) > 20 for r in results.values())


@pytest.mark.conformance(*LAYOUTS)
def test_each_layout_case_validates(fresh_conformance):
    results = {t: fresh_conformance[t] for t in LAYOUTS}
    failed = {t: r["reason"] for t, r in results.items() if r["status"] != "validated"}
    assert not failed, failed


REFUSED = (
    "inkling_text",
    "inkling2_text",
    "cvt",
    "mobilevitv2",
    "gemma4_unified_assistant",
    "jetmoe",
    "hiera",
    "autoformer",
)
"""Types refused for what they compute, each reason naming it."""


@pytest.mark.conformance(*REFUSED)
def test_refusals_name_what_the_model_computes(fresh_conformance):
    results = fresh_conformance
    assert results["autoformer"]["reason"].startswith("no dot-product attention (AutoformerAttention auto-")
    assert results["hiera"]["reason"].startswith("query pooling (HieraMaskUnitAttention, `query_stride`)")
    assert "a mixture of attention heads" in results["jetmoe"]["reason"]
    assert "without key projections of its own" in results["gemma4_unified_assistant"]["reason"]
    assert "convolution over tokens (`k_sconv`)" in results["inkling_text"]["reason"]
    assert "convolution over tokens (`k_proj.sconv`)" in results["inkling2_text"]["reason"]
    assert "convolution over tokens (`attention.convolution_projection_query`)" in results["cvt"]["reason"]
    assert results["mobilevitv2"]["reason"].startswith(
        "no dot-product attention (linear attention (MobileViTV2LinearSelfAttention)"
    )


@pytest.mark.parametrize(
    ("model_type", "mechanism"),
    [
        ("rwkv", "a recurrence with a learned time decay (RwkvSelfAttention)"),
        ("slanet", "additive attention (SLANetAttentionGRUCell)"),
        ("swiftformer", "additive attention (SwiftFormerEfficientAdditiveAttention)"),
        ("patchtsmixer", "gated attention (PatchTSMixerGatedAttention)"),
        ("bert", None),  # softmax(q·k): no other mechanism
        ("jetmoe", None),  # a mixture of attention heads, q·k all the same
    ],
)
def test_attention_named_modules_without_q_k_scores_are_told_apart(model_type, mechanism):
    from attngeom.conformance.mechanisms import no_attention

    reason = no_attention(meta_model(tiny_config(model_type)))
    if mechanism is None:
        assert reason is None
    else:
        assert reason.startswith(f"no dot-product attention ({mechanism}")


def test_grouped_pointwise_projections_are_read_block_diagonal(tmp_path):
    """SqueezeBERT's grouped 1-wide convolutions: read as block-diagonal maps the layers give the model's
    own q and k; read as one dense block (the groups ignored) they do not."""
    from dataclasses import replace

    from attngeom.architectures.discovery.discovered import discovered_layers

    config = tiny_config("squeezebert")
    model = randomized(AutoModel.from_config(config))
    items = [i for i in find_attention(model, config) if isinstance(i, Found)]
    assert items and all(i.blocks > 1 for i in items)
    records, _ = capture(model, items)
    model.save_pretrained(tmp_path)
    source = open_source_for(tmp_path)
    for found, expect_match in ((items, True), ([replace(i, blocks=1) for i in items], False)):
        terms = {item.path: ("scale",) for item in found}
        for item, layer in zip(found, discovered_layers(config, source, found, terms), strict=True):
            try:
                why = compare(layer, records[item.path])
            except RuntimeError as err:  # the dense reading's shapes do not fit the inputs
                why = str(err)
            assert (why is None) == expect_match, why


def test_a_wrapped_linear_is_a_projection_only_while_it_holds_nothing_else():
    from attngeom.architectures.discovery.projections import projection

    attention, wrapper = torch.nn.Module(), torch.nn.Module()
    wrapper.linear = torch.nn.Linear(4, 4)
    attention.q_proj = wrapper
    assert projection(attention, "q_proj") == "q_proj.linear"
    wrapper.norm = torch.nn.LayerNorm(4)  # a map of its own after the linear one: not W_q alone
    assert projection(attention, "q_proj") is None


def test_linear_attention_layers_are_unscored_mixers():
    for model_type, mixer in (("kimi_linear", "DeltaAttention"), ("glm5_next_text", "LinearAttention")):
        config = tiny_config(model_type)
        items = find_attention(meta_model(config), config)
        skipped = [i for i in items if isinstance(i, Skipped)]
        assert skipped and all(mixer in i.mixer for i in skipped), model_type
        assert any(isinstance(i, Found) and i.latent for i in items), model_type


def _codegen_layers(layout: str):
    config = tiny_config("codegen")
    config.rotary_dim = 8  # the default (64) is wider than the tiny heads
    model = randomized(AutoModel.from_config(config))
    items = [i for i in find_attention(model, config, layout) if isinstance(i, Found)]
    records, _ = capture(model, items)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        source = open_source_for(folder)
        layers = [x for x in discover(config, layout).layers(source.config, source) if hasattr(x, "w_q")]
    return [(layer, records[item.path]) for item, layer in zip(items, layers, strict=True)]


def test_codegen_groups_its_fused_rows_by_model_parallel_part():
    assert all(compare(layer, record) is None for layer, record in _codegen_layers("groups_qvk"))
    assert all(compare(layer, record) for layer, record in _codegen_layers("blocks"))


def test_the_content_bias_u_is_the_query_bias_and_v_is_not(monkeypatch):
    """Parakeet's attention adds ``bias_u`` to q before q·k, ``bias_v`` only before the position term:
    the form validates with u folded into the query bias, and fails without it or with v in its place."""
    from attngeom.architectures.discovery import discovered

    config = tiny_config("parakeet_encoder")
    model = randomized(AutoModel.from_config(config))
    items = [i for i in find_attention(model, config) if isinstance(i, Found)]
    records, _ = capture(model, items)
    found = discovered.content_biases(model, items)
    assert found and set(found.values()) == {"bias_u"}
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        source = open_source_for(folder)
        layers = [x for x in discover(config).layers(source.config, source) if hasattr(x, "w_q")]
        assert all(
            compare(layer, records[item.path]) is None for item, layer in zip(items, layers, strict=True)
        )
        assert all("relative_position" in layer.left_out for layer in layers)
        projections = {k: v for k, v in records[items[0].path].items() if not k.endswith("_attn")}
        assert compare(layers[0], projections) == UNSEEN  # the projections alone are never compared
        for biases in ({}, {p: "bias_v" for p in found}):
            monkeypatch.setattr(discovered, "content_biases", lambda model, items, b=biases: b)
            wrong = [x for x in discover(config).layers(source.config, source) if hasattr(x, "w_q")]
            assert all(compare(w, records[i.path]) for i, w in zip(items, wrong, strict=True)), biases


def test_a_folded_query_scale_is_checked_at_the_score_product():
    """Gemma 3n's audio attention multiplies its projected q by softplus(per_dim_scale) outside the
    attention interface, block by block: the form (scale folded into W_q) is checked against the q and k
    of its score product; without the scale it fails there."""
    from dataclasses import replace

    from attngeom.architectures.discovery import discovered

    config = tiny_config("gemma3n_audio")
    model = randomized(AutoModel.from_config(config))
    items = [i for i in find_attention(model, config) if isinstance(i, Found)]
    assert items and all(i.q_scale for i in items)
    from attngeom.conformance.modules import drive

    records, failures = drive(model, items)
    assert not failures and all(r["q_attn"].dim() == 5 for r in records.values())  # (B, H, blocks, rows, d)
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        source = open_source_for(folder)
        layers = [x for x in discover(config).layers(source.config, source) if hasattr(x, "w_q")]
        pairs = list(zip(items, layers, strict=True))
        assert all(compare(layer, records[item.path]) is None for item, layer in pairs)
        unscaled = [replace(i, q_scale="") for i in items]
        plain = discovered.discovered_layers(
            source.config, discovered.Converted(source, model), unscaled, {i.path: () for i in items}
        )
        assert all(compare(layer, records[item.path]) for item, layer in zip(items, plain, strict=True))


def test_only_an_fft_of_q_and_k_is_an_auto_correlation():
    from attngeom.conformance.refusals import correlation_of

    for model_type, correlated in (("autoformer", True), ("informer", False), ("fnet", False)):
        config = tiny_config(model_type)
        assert bool(correlation_of(meta_model(config), config)) == correlated, model_type


def test_a_whole_projection_layernorm_centres_all_heads_together(monkeypatch):
    """ESM C's q/k LayerNorms span H·d_h: centring each head alone instead fails the check."""
    from attngeom.architectures import qk_norms

    config = tiny_config("esmc")
    model = randomized(AutoModel.from_config(config))
    items = [i for i in find_attention(model, config) if isinstance(i, Found)]
    records, _ = capture(model, items)
    fold = qk_norms._fold_norm
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        source = open_source_for(folder)
        for per_head in (False, True):
            if per_head:
                monkeypatch.setattr(
                    qk_norms, "_fold_norm", lambda w, g, h, d, c, whole=False: fold(w, g, h, d, c)
                )
            layers = [x for x in discover(config).layers(source.config, source) if hasattr(x, "w_q")]
            whys = [compare(layer, records[item.path]) for item, layer in zip(items, layers, strict=True)]
            assert all(why is None for why in whys) != per_head, whys


def test_a_fused_projection_outside_the_interface_is_checked_at_its_score_product():
    config = tiny_config("sam_vision_model")
    model = randomized(AutoModel.from_config(config))
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        source = open_source_for(folder)
        for layout, agrees in (("blocks", True), ("per_head", False)):
            items = [i for i in find_attention(model, config, layout) if isinstance(i, Found)]
            records, failure = capture(model, items)
            assert failure is None and all("q_attn" in r for r in records.values())
            layers = [x for x in discover(config, layout).layers(source.config, source) if hasattr(x, "w_q")]
            verdicts = [compare(x, records[i.path]) for i, x in zip(items, layers, strict=True)]
            assert all(v is None for v in verdicts) if agrees else all(verdicts), (layout, verdicts)


def _scores_case(c_q: torch.Tensor, c_k: torch.Tensor, form: str = "mla_rope"):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 5, 4, generator=generator, dtype=torch.float64)
    k = torch.randn(1, 2, 6, 4, generator=generator, dtype=torch.float64)
    q[0, 0, 1] *= 1e-6  # near-zero scores: a ratio of scores would be ill-conditioned there
    layer = SimpleNamespace(n_heads=2, n_kv_heads=2, head_dim=4, form=form)
    permuted = [1, 0, 3, 2]  # the same permutation of head dims for q and k changes no score
    theirs = [(q * c_q[..., None])[..., permuted], (k * c_k[..., None])[..., permuted]]
    return layer, [q, k], theirs


def test_scores_match_up_to_per_token_scalars_and_no_more():
    from attngeom.conformance.check import _compare_scores

    generator = torch.Generator().manual_seed(1)
    c_q = torch.rand(1, 2, 5, generator=generator, dtype=torch.float64) + 0.5
    c_k = torch.rand(1, 2, 6, generator=generator, dtype=torch.float64) + 0.5
    layer, ours, theirs = _scores_case(c_q, c_k)
    assert _compare_scores(layer, ours, theirs, "vectors differ") is None
    theirs[1] = theirs[1] + 1e-3 * torch.randn(theirs[1].shape, generator=generator, dtype=torch.float64)
    assert _compare_scores(layer, ours, theirs, "vectors differ") == "vectors differ"
    layer, ours, theirs = _scores_case(c_q, c_k, form="standard")
    assert _compare_scores(layer, ours, theirs, "v") == "a standard form whose scores are rescaled per token"


@pytest.mark.parametrize("model_type", ["gte", "hrm_text"])
def test_fused_checkpoints_are_read_by_the_models_own_names(model_type, tmp_path):
    from attngeom.architectures.discovery.converted import Converted

    config = tiny_config(model_type)
    model = randomized(AutoModel.from_config(config))
    model.save_pretrained(tmp_path)
    source = open_source_for(tmp_path)
    item = next(i for i in find_attention(model, config) if isinstance(i, Found))
    name = f"{item.q}.weight"
    assert not source.has(name)  # saved fused, under another name
    read = Converted(source, meta_model(config)).get(name)
    assert torch.equal(read.double(), model.get_submodule(item.q).weight.detach())


def test_q_and_k_folded_by_a_batch_like_axis_are_compared_token_by_token():
    """A model that folds a batch-like axis (SAM's point batch) into its attention batch gives q/k of
    shape (batch·points, heads, tokens, d): the form's (batch, heads, points·tokens, d) is refolded to it,
    keeping the token order, so a model that folded the other axis (tokens into the batch) still fails."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64)  # batch, points, tokens, width
    w_q, w_k = (torch.randn(8, 8, generator=generator, dtype=torch.float64) for _ in range(2))
    layer = SimpleNamespace(w_q=w_q, w_k=w_k, b_q=None, b_k=None, n_heads=2, n_kv_heads=2, head_dim=4)
    layer.form = "standard"

    def folded(y):  # (batch, points, tokens, 2·4) → (batch·points, heads, tokens, 4)
        return y.reshape(6, 5, 2, 4).transpose(1, 2)

    record = {"x_q": x, "x_k": x, "q_attn": folded(x @ w_q), "k_attn": folded(x @ w_k)}
    assert compare(layer, record) is None
    other = x.transpose(1, 2).contiguous()  # the points attend, tokens folded into the batch
    record = {"x_q": x, "x_k": x, "q_attn": folded(other @ w_q), "k_attn": folded(other @ w_k)}
    assert compare(layer, record)


def test_q_and_k_not_seen_at_a_score_product_are_never_compared_with_the_projections():
    """Without the q and k of the score product, a projection's output (fused or not) would agree with
    the projection itself whatever the module does with it before q·kᵀ: the check says it did not see
    them instead."""
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(1, 5, 8, generator=generator, dtype=torch.float64)
    w = torch.randn(8, 8, generator=generator, dtype=torch.float64)
    layer = SimpleNamespace(w_q=w, w_k=w, b_q=None, b_k=None, n_heads=2, n_kv_heads=2, head_dim=4)
    layer.form = "standard"
    fused = {"x_q": x, "x_k": x, "q": torch.cat([x @ w] * 3, -1), "k": torch.cat([x @ w] * 3, -1)}
    assert compare(layer, fused) == UNSEEN
    assert compare(layer, {"x_q": x, "x_k": x, "q": x @ w, "k": x @ w}) == UNSEEN  # agrees with itself
    heads = (x @ w).reshape(1, 5, 2, 4).transpose(1, 2)
    assert compare(layer, {"x_q": x, "x_k": x, "q_attn": heads, "k_attn": heads}) is None
