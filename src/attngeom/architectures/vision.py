"""Vision transformers: patch-token encoders, hierarchical (Swin) encoders, image decoders, image-text towers.

DINO checkpoints are model_type ``vit`` and DiT checkpoints ``beit``: they are scored by those maps.
Names on disk (``attention.attention.query``) differ from the names in memory in transformers 5.x
(``attention.q_proj``); both are asked for.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from transformers import PretrainedConfig

from . import gpt_lineage
from .base import Architecture, ArchitectureError, AttentionLayer, TensorReader, fused_qkv, linear

POSITION_FORM = "position_augmented: (x + p) W_q W_kᵀ (x + p)ᵀ, p the position embedding added to q/k inputs"
POSITION_CROSS_FORM = "position_augmented cross: (x + p) W_q W_kᵀ (y + p_y)ᵀ, another sequence's keys"
COSINE_FORM = (
    "cosine: W_q,h W_k,hᵀ up to per-token, per-head normalisation of q and k (scaled cosine attention)"
)


def _block(
    reader: TensorReader,
    stack: str,
    index: int,
    q_names: tuple[str, ...],
    k_names: tuple[str, ...],
    heads: int,
    head_dim: int,
    *,
    k_bias: bool = True,
    left_out: tuple[str, ...] = ("bias", "scale", "absolute_position_embeddings"),
    form: str = "standard",
) -> AttentionLayer:
    """One attention block whose q/k projections are separate linears (any of the name alternatives).

    A checkpoint saved without q/k biases (``qkv_bias=False``) has no bias tensors: none are used, and
    ``bias`` is not listed as left out.
    """
    b_q = _optional(reader, tuple(f"{n}.bias" for n in q_names))
    b_k = _optional(reader, tuple(f"{n}.bias" for n in k_names)) if k_bias else None
    if b_q is None and b_k is None:
        left_out = tuple(term for term in left_out if term != "bias")
    return AttentionLayer(
        stack=stack,
        layer=index,
        w_q=linear(reader.get(*(f"{n}.weight" for n in q_names))),
        w_k=linear(reader.get(*(f"{n}.weight" for n in k_names))),
        b_q=b_q,
        b_k=b_k,
        n_heads=heads,
        n_kv_heads=heads,
        head_dim=head_dim,
        left_out=left_out,
        form=form,
    )


def _optional(reader: TensorReader, names: tuple[str, ...]) -> torch.Tensor | None:
    """The first of ``names`` that exists (in order, as ``get`` looks), or None."""
    for name in names:
        if reader.has(name):
            return reader.get(name)
    return None


def _vit_names(disk: str, memory: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """q/k names: on disk ``{disk}.attention.query``, in memory ``{m}.q_proj`` for each alternative m."""
    return (f"{disk}.attention.query", *(f"{m}.q_proj" for m in memory)), (
        f"{disk}.attention.key",
        *(f"{m}.k_proj" for m in memory),
    )


def _vit_stack(
    config: PretrainedConfig,
    reader: TensorReader,
    k_bias: bool = True,
    left_out: tuple[str, ...] = ("bias", "scale", "absolute_position_embeddings"),
) -> Iterator[AttentionLayer]:
    """ViT layout: ``encoder.layer.i.attention.attention.query`` on disk; ``layers.i.attention.q_proj``
    (ViT, DeiT) or ``encoder.layer.i.attention.q_proj`` (DINOv2) in memory."""
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        names = _vit_names(
            f"encoder.layer.{i}.attention", (f"layers.{i}.attention", f"encoder.layer.{i}.attention")
        )
        yield _block(
            reader, "encoder", i, *names, heads, config.hidden_size // heads, k_bias=k_bias, left_out=left_out
        )


def vit_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """The ViT layout (also the audio spectrogram transformer's)."""
    return _vit_stack(config, reader)


def _beit_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """BEiT / DiT / data2vec-vision: the key has no bias; relative position bias is outside the form."""
    positions = ("relative_position",)
    if getattr(config, "use_absolute_position_embeddings", False):
        positions += ("absolute_position_embeddings",)
    return _vit_stack(config, reader, k_bias=False, left_out=("bias", "scale") + positions)


def _vit_mae_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ViT-MAE: the encoder, and the pre-training decoder when the checkpoint has it (ViTMAEForPreTraining)."""
    yield from _vit_stack(config, reader)
    disk, memory = "decoder_encoder.layer.{i}.attention", "decoder_layers.{i}.attention"
    if not (
        reader.has(disk.format(i=0) + ".attention.query.weight")
        or reader.has(memory.format(i=0) + ".q_proj.weight")
    ):
        return
    heads = config.decoder_num_attention_heads
    for i in range(config.decoder_num_hidden_layers):
        names = _vit_names(disk.format(i=i), (memory.format(i=i),))
        yield _block(reader, "decoder", i, *names, heads, config.decoder_hidden_size // heads)


def _swin_layers(
    config: PretrainedConfig, reader: TensorReader, stack: str = "encoder"
) -> Iterator[AttentionLayer]:
    """Swin: stage s has width embed_dim·2^s and its own head count; layers are numbered across stages.

    Windowed attention applies the same W_q, W_k to every window; the relative position bias is outside
    the form. Swin v2 normalises q and k per head (scaled cosine attention): its form is W_q,h W_k,hᵀ up
    to per-token, per-head scalars, and its key has no bias.
    """
    v2 = config.model_type == "swinv2"
    index = 0
    for stage, (depth, heads) in enumerate(zip(config.depths, config.num_heads, strict=True)):
        width = config.embed_dim * 2**stage
        for block in range(depth):
            base = f"encoder.layers.{stage}.blocks.{block}.attention"
            yield _block(
                reader,
                stack,
                index,
                (f"{base}.self.query", f"{base}.q_proj"),
                (f"{base}.self.key", f"{base}.k_proj"),
                heads,
                width // heads,
                k_bias=not v2,
                left_out=("bias", "relative_position") + (() if v2 else ("scale",)),
                form=COSINE_FORM if v2 else "standard",
            )
            index += 1


def _clip_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """CLIP / SigLIP: the text and the vision tower, each its own stack (a single tower on its own too).

    SigLIP's attention-pooling head (a learned probe attending to the patches) is not scored.
    """
    towers = []
    if config.model_type.endswith("_text_model"):
        towers = [("text", config)]
    elif config.model_type.endswith("_vision_model"):
        towers = [("vision", config)]
    else:
        towers = [("text", config.text_config), ("vision", config.vision_config)]
    for stack, tower in towers:
        heads = tower.num_attention_heads
        for i in range(tower.num_hidden_layers):
            # A single tower saves its layers with or without the ``text_model.`` prefix.
            bases = (f"{stack}_model.encoder.layers.{i}.self_attn", f"encoder.layers.{i}.self_attn")
            q_names, k_names = tuple(f"{b}.q_proj" for b in bases), tuple(f"{b}.k_proj" for b in bases)
            yield _block(reader, stack, i, q_names, k_names, heads, tower.hidden_size // heads)


def _clip_count(config: PretrainedConfig) -> int:
    if hasattr(config, "text_config") and hasattr(config, "vision_config"):
        return config.text_config.num_hidden_layers + config.vision_config.num_hidden_layers
    return config.num_hidden_layers


def _git_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """GIT: a CLIP image encoder (stack ``vision``) and a BERT-style text decoder (stack ``decoder``) whose
    self-attention runs over [image tokens; text tokens], causal on the text."""
    vision = config.vision_config
    heads = vision.num_attention_heads
    for i in range(vision.num_hidden_layers):
        base = f"image_encoder.vision_model.encoder.layers.{i}.self_attn"
        yield _block(
            reader, "vision", i, (f"{base}.q_proj",), (f"{base}.k_proj",), heads, vision.hidden_size // heads
        )
    heads = config.num_attention_heads
    for i in range(config.num_hidden_layers):
        base = f"encoder.layer.{i}.attention.self"
        yield _block(
            reader, "decoder", i, (f"{base}.query",), (f"{base}.key",), heads, config.hidden_size // heads
        )


def _sam_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """SAM: the image encoder (fused ``qkv`` with columns [q | k | v], windowed and global layers, decomposed
    relative positions outside the form) and the two-way mask decoder.

    The decoder's attention projects to a narrower internal width (hidden / downsample rate); the
    callers add point / image position embeddings to the q and k inputs (not to v), except in the first
    self-attention. Its token → image and image → token attentions are cross stacks; the final token →
    image attention is the last layer of ``cross_token_to_image``.
    """
    vision = config.vision_config
    heads, d = vision.num_attention_heads, vision.hidden_size
    positions = ("relative_position",) if vision.use_rel_pos else ()
    positions += ("absolute_position_embeddings",) if vision.use_abs_pos else ()
    for i in range(vision.num_hidden_layers):
        prefix = f"vision_encoder.layers.{i}.attn.qkv"
        bias = reader.get(f"{prefix}.bias") if vision.qkv_bias else None
        yield AttentionLayer(
            stack="encoder",
            layer=i,
            **fused_qkv(reader.get(f"{prefix}.weight"), bias),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=d // heads,
            left_out=(("bias",) if vision.qkv_bias else ()) + ("scale",) + positions,
        )
    decoder = config.mask_decoder_config
    heads = decoder.num_attention_heads

    def attention(stack: str, index: int, name: str, form: str, cross: bool) -> AttentionLayer:
        w_q = linear(reader.get(f"mask_decoder.transformer.{name}.q_proj.weight"))
        return AttentionLayer(
            stack=stack,
            layer=index,
            w_q=w_q,
            w_k=linear(reader.get(f"mask_decoder.transformer.{name}.k_proj.weight")),
            b_q=reader.get(f"mask_decoder.transformer.{name}.q_proj.bias"),
            b_k=reader.get(f"mask_decoder.transformer.{name}.k_proj.bias"),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=w_q.shape[1] // heads,
            left_out=("bias", "scale"),
            form=form,
            cross=cross,
        )

    layers = decoder.num_hidden_layers
    for i in range(layers):
        yield attention("decoder", i, f"layers.{i}.self_attn", "standard" if i == 0 else POSITION_FORM, False)
    for i in range(layers):
        yield attention(
            "cross_token_to_image", i, f"layers.{i}.cross_attn_token_to_image", POSITION_CROSS_FORM, True
        )
    yield attention("cross_token_to_image", layers, "final_attn_token_to_image", POSITION_CROSS_FORM, True)
    for i in range(layers):
        yield attention(
            "cross_image_to_token", i, f"layers.{i}.cross_attn_image_to_token", POSITION_CROSS_FORM, True
        )


def _mask2former_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Mask2Former: the Swin backbone (stack ``backbone``) and the masked-attention transformer decoder.

    The decoder's self-attention (stack ``decoder``) and its masked cross-attention to the multi-scale
    pixel features (stack ``cross``, an ``nn.MultiheadAttention`` with fused ``in_proj`` rows [q; k; v])
    see position-augmented q/k inputs. The pixel decoder's multi-scale deformable attention samples
    features at predicted offsets: it is not a bilinear form and is not scored.
    """
    backbone = config.backbone_config
    if backbone.model_type == "swin":
        yield from _swin_layers(backbone, reader, stack="backbone")
    elif backbone.model_type != "resnet":  # a ResNet backbone has no attention
        raise ArchitectureError(
            f"mask2former with a {backbone.model_type!r} backbone is not supported; supported backbones: swin, resnet"
        )
    heads, d = config.num_attention_heads, config.hidden_dim
    layers = config.decoder_layers - 1  # the first query update happens before the decoder layers
    for i in range(layers):
        yield _block(
            reader,
            "decoder",
            i,
            (f"transformer_module.decoder.layers.{i}.self_attn.q_proj",),
            (f"transformer_module.decoder.layers.{i}.self_attn.k_proj",),
            heads,
            d // heads,
            left_out=("bias", "scale"),
            form=POSITION_FORM,
        )
    for i in range(layers):
        prefix = f"transformer_module.decoder.layers.{i}.cross_attn.in_proj"
        yield AttentionLayer(
            stack="cross",
            layer=i,
            **fused_qkv(reader.get(f"{prefix}_weight"), reader.get(f"{prefix}_bias")),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=d // heads,
            left_out=("bias", "scale", "attention_mask"),
            form=POSITION_CROSS_FORM,
            cross=True,
        )


def _mask2former_count(config: PretrainedConfig) -> int:
    backbone = sum(config.backbone_config.depths) if config.backbone_config.model_type == "swin" else 0
    return backbone + 2 * (config.decoder_layers - 1)


QK_NORM_CROSS_FORM = (
    "qk_norm per head cross: W_q,h diag(g_q ⊙ g_k) W_k,hᵀ between text and image states, "
    "up to per-token-and-head scalars"
)


def _mllama_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """Llama 3.2 Vision: the vision encoder (local then global layers, one ``vision`` stack), the text
    decoder's self-attention (``decoder``: grouped-query, rotary) and its cross-attention layers to the
    projected image features (``cross``), whose q and k are RMS-normalised per head: the gains are
    folded into W_q, the per-token-and-head 1/rms scalars are outside the form.
    """
    vision = config.vision_config
    heads = vision.attention_heads
    local = [f"vision_model.transformer.layers.{i}" for i in range(vision.num_hidden_layers)]
    global_ = [f"vision_model.global_transformer.layers.{i}" for i in range(vision.num_global_layers)]
    for index, base in enumerate(local + global_):
        yield AttentionLayer(
            stack="vision",
            layer=index,
            w_q=linear(reader.get(f"{base}.self_attn.q_proj.weight")),
            w_k=linear(reader.get(f"{base}.self_attn.k_proj.weight")),
            n_heads=heads,
            n_kv_heads=heads,
            head_dim=vision.hidden_size // heads,
            left_out=("scale",),
        )
    text = config.text_config
    heads, kv_heads = text.num_attention_heads, text.num_key_value_heads
    head_dim = text.hidden_size // heads
    cross_layers = set(text.cross_attention_layers)

    def get(i: int, name: str) -> torch.Tensor:  # on disk under language_model.model., in memory without
        return reader.get(f"language_model.model.layers.{i}.{name}", f"language_model.layers.{i}.{name}")

    for i in range(text.num_hidden_layers):
        if i in cross_layers:
            continue
        yield AttentionLayer(
            stack="decoder",
            layer=i,
            w_q=linear(get(i, "self_attn.q_proj.weight")),
            w_k=linear(get(i, "self_attn.k_proj.weight")),
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=("rotary", "scale"),
        )
    for i in sorted(cross_layers):
        gains = get(i, "cross_attn.q_norm.weight") * get(i, "cross_attn.k_norm.weight")
        yield AttentionLayer(
            stack="cross",
            layer=i,
            w_q=linear(get(i, "cross_attn.q_proj.weight")) * gains.repeat(heads),
            w_k=linear(get(i, "cross_attn.k_proj.weight")),
            n_heads=heads,
            n_kv_heads=kv_heads,
            head_dim=head_dim,
            left_out=("qk_norm_scalars", "scale"),
            form=QK_NORM_CROSS_FORM,
            cross=True,
        )


def _imagegpt_layers(config: PretrainedConfig, reader: TensorReader) -> Iterator[AttentionLayer]:
    """ImageGPT is GPT-2 over pixel tokens: Conv1D ``c_attn`` with columns [q | k | v]."""
    return gpt_lineage._gpt2_layers(config, reader)


def _layers(config: PretrainedConfig) -> int:
    return config.num_hidden_layers


def _vision(model_types: tuple[str, ...], layers, **kwargs) -> Architecture:
    kwargs.setdefault("n_layers", _layers)
    kwargs.setdefault("stacks", ("encoder",))
    kwargs.setdefault("objective", "bidirectional")
    return Architecture(model_types=model_types, modality="vision", layers=layers, **kwargs)


ARCHITECTURES: list[Architecture] = [
    _vision(
        ("vit", "deit", "vit_msn", "dinov2", "dinov2_with_registers", "yolos"),
        vit_layers,
        notes="DINO is vit",
    ),
    _vision(("beit", "data2vec-vision"), _beit_layers, notes="DiT is beit"),
    _vision(
        ("vit_mae",),
        _vit_mae_layers,
        n_layers=lambda c: c.num_hidden_layers + c.decoder_num_hidden_layers,
        stacks=("encoder", "decoder"),
        notes="decoder only in pre-training checkpoints",
    ),
    _vision(("swin", "swinv2"), _swin_layers, n_layers=lambda c: sum(c.depths)),
    Architecture(
        model_types=("clip", "siglip"),
        modality="multimodal",
        objective="bidirectional",
        layers=_clip_layers,
        n_layers=_clip_count,
        stacks=("text", "vision"),
        stack_modality={"text": "language", "vision": "vision"},
    ),
    Architecture(
        model_types=("clip_text_model", "siglip_text_model"),
        modality="language",
        objective="bidirectional",
        layers=_clip_layers,
        n_layers=_clip_count,
        stacks=("text",),
    ),
    _vision(
        ("clip_vision_model", "siglip_vision_model"), _clip_layers, n_layers=_clip_count, stacks=("vision",)
    ),
    Architecture(
        model_types=("git",),
        modality="multimodal",
        objective="autoregressive",
        layers=_git_layers,
        n_layers=lambda c: c.num_hidden_layers + c.vision_config.num_hidden_layers,
        stacks=("vision", "decoder"),
        stack_modality={"vision": "vision"},
    ),
    _vision(
        ("sam",),
        _sam_layers,
        n_layers=lambda c: (
            c.vision_config.num_hidden_layers + 3 * c.mask_decoder_config.num_hidden_layers + 1
        ),
        stacks=("encoder", "decoder", "cross_token_to_image", "cross_image_to_token"),
        objective="encoder-decoder",
        notes="mask decoder: position-augmented q/k inputs; token↔image attentions are cross stacks",
    ),
    _vision(
        ("mask2former",),
        _mask2former_layers,
        n_layers=_mask2former_count,
        stacks=("backbone", "decoder", "cross"),
        objective="encoder-decoder",
        notes="pixel decoder's deformable attention is not a bilinear form: not scored",
    ),
    Architecture(
        model_types=("mllama",),
        modality="multimodal",
        objective="autoregressive",
        layers=_mllama_layers,
        n_layers=lambda c: (
            c.vision_config.num_hidden_layers
            + c.vision_config.num_global_layers
            + c.text_config.num_hidden_layers
        ),
        stacks=("vision", "decoder", "cross"),
        stack_modality={"vision": "vision", "decoder": "language"},
        notes="Llama 3.2 Vision; cross-attention q/k RMS-normalised per head (gains folded into W_q)",
    ),
    Architecture(
        model_types=("imagegpt",),
        modality="vision",
        objective="autoregressive",
        layers=_imagegpt_layers,
        n_layers=_layers,
        stacks=("decoder",),
    ),
]
