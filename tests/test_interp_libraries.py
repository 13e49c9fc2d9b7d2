"""Models of the interpretability libraries: a TransformerLens HookedTransformer scores exactly as the
checkpoint it was converted from (with TransformerLens' own conversion functions, no weight processing),
so does a TransformerBridge booted around the checkpoint's model, and an nnsight wrapper as the model it
wraps. The ``interp`` extra; skipped where it is not installed. The bridge tests pass under TransformerLens
3.9 (the extra's range) and 4.3, with 4.x installed beside it (``pip install --no-deps --target DIR
transformer-lens==4.3.0`` and DIR first on PYTHONPATH), where the HookedTransformer tests are skipped."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import attngeom
from attngeom.errors import InputError

lens = pytest.importorskip("transformer_lens", reason="the interp extra: pip install -e '.[interp]'")
try:  # TransformerLens 4 removed it (its bridges are tested under both 3.x and 4.x)
    HookedTransformer = lens.HookedTransformer
    HookedTransformerConfig = lens.HookedTransformerConfig
except ImportError:
    HookedTransformer = HookedTransformerConfig = None
hooked = pytest.mark.skipif(HookedTransformer is None, reason="TransformerLens 4 has no HookedTransformer")
SCORES = ["stack", "layer", "head", "kv_head", "symmetry", "directionality", "norm"]
NO_PROCESSING = dict(
    fold_ln=False, center_writing_weights=False, center_unembed=False, fold_value_biases=False
)


def scores(model) -> pd.DataFrame:
    return attngeom.score(model, progress=False)[SCORES]


def with_random_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Non-unit norm scales, so folding them into W_Q/W_K would change the scores."""
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "ln" in name or "norm" in name:
                parameter.uniform_(0.5, 2.0)
    return model


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=16, vocab_size=50)
    return with_random_norms(GPT2LMHeadModel(config).eval())


def hooked_gpt2(hf: GPT2LMHeadModel, **processing):
    c = hf.config
    cfg = HookedTransformerConfig(
        d_model=c.n_embd, n_layers=c.n_layer, n_heads=c.n_head, d_head=c.n_embd // c.n_head, d_mlp=4 * c.n_embd,
        n_ctx=c.n_positions, d_vocab=c.vocab_size, act_fn="gelu_new", normalization_type="LN",
        original_architecture="GPT2LMHeadModel",
    )  # fmt: skip
    model = HookedTransformer(cfg)
    state = lens.pretrained.weight_conversions.convert_gpt2_weights(hf, cfg)
    model.load_and_process_state_dict(state, **{**NO_PROCESSING, **processing})
    return model


@hooked
def test_a_hooked_gpt2_scores_exactly_as_its_checkpoint_on_disk(gpt2, tmp_path):
    """Same q/k values, laid out by the engine in one canonical layout: identical by construction."""
    gpt2.save_pretrained(tmp_path / "gpt2")
    on_disk = scores(str(tmp_path / "gpt2"))
    hooked = scores(hooked_gpt2(gpt2))
    assert len(on_disk) == 2 * (4 + 1)
    pd.testing.assert_frame_equal(hooked, on_disk, check_exact=True)
    frame = attngeom.score(hooked_gpt2(gpt2), progress=False)
    assert set(frame["model_type"]) == {"hooked_transformer"} and set(frame["objective"]) == {
        "autoregressive"
    }


@hooked
def test_folded_layernorm_is_what_is_scored(gpt2):
    """``fold_ln`` (from_pretrained's default) multiplies the LayerNorm scale into W_Q/W_K: other scores,
    as the README says."""
    folded = scores(hooked_gpt2(gpt2, fold_ln=True))
    plain = scores(gpt2)
    assert (folded["symmetry"] - plain["symmetry"]).abs().max() > 1e-3


@hooked
def test_a_hooked_llama_with_grouped_query_attention_scores_as_its_checkpoint():
    torch.manual_seed(0)
    c = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, vocab_size=50, max_position_embeddings=16,
    )  # fmt: skip
    hf = with_random_norms(LlamaForCausalLM(c).eval())
    cfg = HookedTransformerConfig(
        d_model=32, n_layers=2, n_heads=4, n_key_value_heads=2, d_head=8, d_mlp=64, n_ctx=16, d_vocab=50,
        act_fn="silu", normalization_type="RMS", positional_embedding_type="rotary", rotary_dim=8,
        gated_mlp=True, final_rms=True, original_architecture="LlamaForCausalLM",
    )  # fmt: skip
    model = HookedTransformer(cfg)
    model.load_and_process_state_dict(
        lens.pretrained.weight_conversions.convert_llama_weights(hf, cfg), **NO_PROCESSING
    )
    hooked, plain = scores(model), scores(hf)
    assert hooked["kv_head"].dropna().tolist() == [0, 0, 1, 1] * 2
    pd.testing.assert_frame_equal(hooked, plain, check_exact=True)


@hooked
def test_a_bidirectional_config_is_an_encoder():
    cfg = HookedTransformerConfig(
        d_model=16, n_layers=1, n_heads=2, d_head=8, n_ctx=8, d_vocab=20, attention_dir="bidirectional",
        attn_only=True,
    )  # fmt: skip
    frame = attngeom.score(HookedTransformer(cfg), progress=False)
    assert set(frame["stack"]) == {"encoder"} and set(frame["objective"]) == {"bidirectional"}


def bridged(hf: torch.nn.Module, name: str):
    """A TransformerBridge around ``hf`` (booted offline with a one-word tokenizer; it wraps ``hf`` in
    place)."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    bridge = pytest.importorskip("transformer_lens.model_bridge").TransformerBridge
    words = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, eos_token="<unk>", pad_token="<unk>", add_bos_token=True, name_or_path=name
    )
    hf.config.architectures = [type(hf).__name__]  # how the bridge picks its adapter
    hf.config._name_or_path = name
    return bridge.boot_transformers(name, hf_model=hf, tokenizer=tokenizer)


def test_a_transformer_bridge_scores_as_its_checkpoint_on_disk(gpt2, tmp_path, monkeypatch):
    """TransformerLens' current API wraps the transformers model: its W_Q/W_K are the checkpoint's, and
    after ``enable_compatibility_mode`` (LayerNorm folded) what it then holds."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    gpt2.save_pretrained(tmp_path / "gpt2")
    on_disk = scores(str(tmp_path / "gpt2"))
    bridge = bridged(copy.deepcopy(gpt2), "gpt2")
    pd.testing.assert_frame_equal(scores(bridge), on_disk, check_exact=True)
    frame = attngeom.score(bridge, progress=False)
    assert set(frame["model_type"]) == {"hooked_transformer"} and set(frame["objective"]) == {
        "autoregressive"
    }
    bridge.enable_compatibility_mode()
    assert (scores(bridge)["symmetry"] - on_disk["symmetry"]).abs().max() > 1e-3


def test_a_bridged_llama_with_grouped_query_attention_scores_as_its_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    c = LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, vocab_size=50, max_position_embeddings=16,
    )  # fmt: skip
    hf = with_random_norms(LlamaForCausalLM(c).eval())
    hf.save_pretrained(tmp_path / "llama")
    on_disk = scores(str(tmp_path / "llama"))
    bridge = scores(bridged(hf, "meta-llama/Llama-3.2-1B"))
    assert bridge["kv_head"].dropna().tolist() == [0, 0, 1, 1] * 2
    columns = [c for c in SCORES if c != "stack"]  # the lens map's stack is ``decoder`` for any causal model
    pd.testing.assert_frame_equal(bridge[columns], on_disk[columns], check_exact=True)


SMALL = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=50,
    max_position_embeddings=32,
)  # fmt: skip


def test_a_bridged_qwen3_folds_the_q_k_norms_its_blocks_hold(tmp_path, monkeypatch):
    """Qwen3's blocks hold per-head RMSNorms of q and k (the bridge's cfg says use_qk_norm False): folded
    as discovery folds them, the bridge scores exactly as the checkpoint; W_Q, W_K alone do not."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    hf = with_random_norms(Qwen3ForCausalLM(Qwen3Config(**SMALL, num_key_value_heads=2, head_dim=8)).eval())
    hf.save_pretrained(tmp_path / "qwen3")
    on_disk = scores(str(tmp_path / "qwen3"))
    bridge = bridged(hf, "Qwen/Qwen3-0.6B")
    assert not bridge.cfg.use_qk_norm and "q_norm" in dict(bridge.blocks[0].attn.named_children())
    frame = attngeom.score(bridge, progress=False)
    assert set(frame["form"]) == {
        "qk_norm per head: W_q diag(g_q) (W_k diag(g_k))ᵀ, up to per-token-and-head scalars"
    }
    columns = [c for c in SCORES if c != "stack"]
    pd.testing.assert_frame_equal(frame[SCORES][columns], on_disk[columns], check_exact=False, rtol=1e-12)
    with torch.no_grad():  # gains of 1: W_Q and W_K alone, which the gains above change
        for block in hf.model.layers:
            block.self_attn.q_norm.weight.fill_(1.0)
            block.self_attn.k_norm.weight.fill_(1.0)
    unit = scores(bridge)
    assert (unit["symmetry"] - on_disk["symmetry"]).abs().max() > 1e-3


def test_a_bridged_bert_is_a_bidirectional_encoder_as_its_checkpoint(tmp_path, monkeypatch):
    """The bridge's cfg calls BERT causal; its labels are those attngeom gives BERT."""
    from transformers import BertConfig, BertForMaskedLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    hf = BertForMaskedLM(BertConfig(**SMALL)).eval()
    hf.save_pretrained(tmp_path / "bert")
    on_disk = attngeom.score(str(tmp_path / "bert"), progress=False)
    frame = attngeom.score(bridged(hf, "google-bert/bert-base-uncased"), progress=False)
    assert set(frame["objective"]) == set(on_disk["objective"]) == {"bidirectional"}
    assert set(frame["stack"]) == {"encoder"}
    columns = [c for c in SCORES if c != "stack"]
    pd.testing.assert_frame_equal(frame[columns], on_disk[columns], check_exact=True)


@pytest.mark.parametrize("kind", ["bart", "jamba"])
def test_a_bridge_that_is_not_one_list_of_attention_blocks_is_refused_in_one_line(kind, monkeypatch):
    """BART's bridge holds encoder_blocks and decoder_blocks; Jamba's blocks hold Mamba mixers."""
    from transformers import BartConfig, BartForConditionalGeneration, JambaConfig, JambaForCausalLM

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    torch.manual_seed(0)
    if kind == "bart":
        config = BartConfig(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=50, max_position_embeddings=32,
        )  # fmt: skip
        bridge, why = (
            bridged(BartForConditionalGeneration(config).eval(), "facebook/bart-base"),
            "encoder_blocks",
        )
    else:
        config = JambaConfig(
            **SMALL, num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
            expert_layer_offset=1, num_experts=2, mamba_d_state=4, mamba_dt_rank=4, use_mamba_kernels=False,
        )  # fmt: skip
        bridge, why = bridged(JambaForCausalLM(config).eval(), "ai21labs/Jamba-v0.1"), "JambaMambaMixer"
    with pytest.raises(InputError, match=f"TransformerBridge of {kind}: .*{why}") as raised:
        attngeom.score(bridge, progress=False)
    assert "\n" not in str(raised.value) and "original_model" in str(raised.value)


@hooked
def test_q_and_k_normalised_after_their_projections_are_refused():
    cfg = HookedTransformerConfig(
        d_model=16, n_layers=1, n_heads=2, d_head=8, n_ctx=8, d_vocab=20, attn_only=True, use_qk_norm=True,
        normalization_type="RMS",
    )  # fmt: skip
    with pytest.raises(InputError, match="use_qk_norm"):
        attngeom.score(HookedTransformer(cfg), progress=False)


def test_an_nnsight_wrapper_scores_as_the_model_it_wraps(gpt2):
    nnsight = pytest.importorskip("nnsight")
    pd.testing.assert_frame_equal(scores(nnsight.NNsight(gpt2)), scores(gpt2), check_exact=True)


def test_anything_else_is_still_refused_in_one_line():
    with pytest.raises(InputError, match="a TransformerLens HookedTransformer or an nnsight wrapper"):
        attngeom.score(object(), progress=False)
