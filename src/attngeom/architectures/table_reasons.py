"""Why each hand-written table is kept: what discovery cannot see for that ``model_type``, in one line.

Every other type transformers ships is scored by discovery (``discovered``), validated by the generated
conformance run; a table is kept only where discovery cannot read the checkpoint, or would read it with
another form or label than the model computes (``python -m attngeom.conformance.table_agreement``
compares the two on each type's tiny model). ``registry.register`` refuses a table without a reason here.
A leaf module.
"""

from __future__ import annotations

_READ_AS_WRITTEN = (
    "config.json read as written, without importing transformers (sources.config.READ_AS_WRITTEN): "
    "discovery needs transformers' model classes"
)
_NOPE_BY_CODE = (
    "its global layers are NoPE by its modeling code, not by its config: discovery would list rotary there"
)
_POSITIONS_IN_INPUT = (
    "q and k read x + p (position embeddings added to the q/k inputs, not to v): a form of the "
    "position-augmented input, which discovery would call standard"
)
_TWO_FORMS = "two forms per module (query/key and query_global/key_global): discovery reads one"
_AUDIO_TOWER = "its HTS-AT (Swin) audio tower does not run in the tiny model: discovery refuses it"
_FUSED_OUTSIDE = (
    "fused q/k/v rows split outside transformers' attention interface: the conformance cannot confirm "
    "discovery's split (refused)"
)
_TOWER_UNSEEN = (
    "a checkpoint's tower may be another model_type than the tiny model's (a Pixtral vision tower, an OPT "
    "or T5 language model): discovery validates only the tiny model's towers"
)
_BLIP_TOWER = "a tower of BLIP or BLIP-2, whose tables read it by this map"

WHY: dict[str, str] = {
    "llama": _READ_AS_WRITTEN,
    "mistral": _READ_AS_WRITTEN,
    "mixtral": _READ_AS_WRITTEN,
    "gemma": _READ_AS_WRITTEN,
    "mobilellm": "remote code: its config.json is read as Llama's without transformers or its code",
    "cohere2": _NOPE_BY_CODE,
    "exaone4": _NOPE_BY_CODE,
    "stablelm": "its qk_layernorm is a list of LayerNorms, one per head: no norm kind discovery folds",
    "llama4_text": "q and k L2-normalised per head by a function, no norm module: discovery refuses it",
    "llama4": "its vision encoder does not run in the tiny model (discovery refuses it); text as llama4_text",
    "bloom": _FUSED_OUTSIDE,
    "falcon": _FUSED_OUTSIDE + "; three fused layouts set by its config",
    "gpt_bigcode": "its fused c_attn layout is set by the config (multi_query: [q | k | v], else per head): "
    "discovery reads the one layout of the tiny model",
    "mpt": "attn_config.qk_ln checkpoints hold q/k LayerNorms that transformers' MPT never runs: refused",
    "dbrx": "transformers' default config does not build its model: discovery has no tiny model",
    "funnel": "discovery finds no attention in it (q_head/k_head projections, the head width in its config "
    "only); with block_repeats above 1 one module is applied with pooled, then unpooled queries (two forms)",
    "deberta": "q and k fused in in_proj rows per head with a separate q_bias: no q/k projections to discover",
    "xlnet": "q and k are einsum parameters, not projection modules: nothing for discovery to find",
    "mobilebert": "its tiny model does not run (discovery refuses it); q/k read the true_hidden_size bottleneck",
    "deepseek_v2": "discovery's rotary (decoder_rope) part does not validate against the forward pass",
    "wavlm": "its attention runs neither in the tiny model's forward pass nor on its own: discovery refuses it",
    "clap": _AUDIO_TOWER,
    "clap_audio_model": _AUDIO_TOWER,
    "qwen2_vl_vision": "transformers defines no model class for the tower alone: nothing for discovery to build",
    "longformer": _TWO_FORMS,
    "led": _TWO_FORMS,
    "detr": _POSITIONS_IN_INPUT,
    "sam": _POSITIONS_IN_INPUT,
    "mask2former": _POSITIONS_IN_INPUT + "; discovery misses its masked cross-attention stack",
    "swinv2": "scaled cosine attention (q, k L2-normalised per head in the forward): discovery would call "
    "the form standard",
    "longt5": "its local blocks' masks read as causal in the tiny model: discovery's objective would be "
    "autoregressive",
    "seamless_m4t": "speech and text towers and a text-to-unit model whose audio or language roles its "
    "module paths do not say",
    "musicgen": "its decoder reads audio codes, not text (modality audio); the paper's reference names its "
    "stacks encoder and decoder",
    "musicgen_decoder": "MusicGen's decoder alone: as musicgen",
    "speecht5": "its prenets keep the whole forward pass from running: its roles are not observed; the paper's "
    "reference names its stacks encoder and decoder",
    "imagegpt": "its input_ids are colour clusters of pixels: discovery's modality would be language",
    "llava": _TOWER_UNSEEN,
    "llava_next": _TOWER_UNSEEN,
    "blip": "its checkpoint classes hold their text towers under other names (text_encoder, text_decoder.bert) "
    "than the tiny base model: discovery misses them or fails",
    "blip-2": _TOWER_UNSEEN,
    "blip_vision_model": _BLIP_TOWER,
    "blip_2_vision_model": _BLIP_TOWER,
    "blip_text_model": _BLIP_TOWER,
    "blip_2_qformer": _BLIP_TOWER,
    "git": "its decoder attends to the image tokens both ways and to the text causally: discovery reads the "
    "tiny model's mask as bidirectional and its modality as vision",
    "vit_mae": "its pre-training checkpoints add a decoder the tiny base model lacks: discovery leaves it unscored",
    "dpt": "a backbone_config (DINOv2, BEiT, Swin v2) replaces its ViT encoder, saved under the backbone's "
    "old names: discovery validated the tiny model's ViT only",
    "wav2vec2-bert": "its adapter layers (add_adapter, on in the released checkpoints) are off in the tiny model: "
    "discovery leaves them unscored",
    "mllama": "its vision encoder's local and global layers are one stack (the paper's Llama-3.2-11B-Vision): "
    "discovery names a stack per module path and splits them",
    "hooked_transformer": "TransformerLens' layout (blocks.{i}.attn.W_Q), not a transformers model",
}
"""``model_type`` → why its table is kept, one line."""
