"""Random inputs for a tiny model's forward pass, made by the names of its ``forward``'s parameters.

Sizes come from the config (and its sub-configs: a runner's audio or vision width may sit in
``audio_config``) or from the module itself (a vision tower fed flattened patches: the width its patch
embedding takes). Where two layouts are in use under one name (mel features as (B, mel, T) or (B, T, mel),
a waveform with or without a channel axis, images one or several per example) both are offered, in turn.
A set with media holds one image or recording, and a model that merges media into its text gets one
placeholder token per media embedding, so that its whole forward reaches every tower.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator

import torch

from .placeholders import placeholders, token_types
from .tiny import reserved_tokens

GRID = (1, 4, 4)
"""A patch-grid image (t, h, w): 4 × 4 patches, divisible by the usual 2 × 2 merge."""
GRIDS = ("grid_thw", "image_grid_thw")
MERGES = ("merge_sizes", "image_merge_sizes")
AUDIO = ("input_features", "input_values")
STATES = re.compile(r"^(hidden_states|\w+_embeds)$")
"""A required input of this name is states of the model's width (a q-former's queries, a fusion stack's input)."""
LAYOUTS = (0, 1, 2, 3)
"""``_Maker`` variants: the usual layout, the second one in use, frames stacked as the first linear map reads
them, mel bins that a 2-D convolution subsampler reduces to what its projection reads (time first)."""
MEDIA = {"pixel_values", "pixel_values_videos", "flattened_patches", *AUDIO}
FEATURE_MASKS = ("input_features_mask", "feature_attention_mask")


def _configs(config) -> Iterator:
    """``config`` and its sub-configs, breadth first."""
    from transformers import PretrainedConfig

    queue, seen = [config], set()
    while queue:
        current = queue.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        queue += [v for v in vars(current).values() if isinstance(v, PretrainedConfig)]


def _find(config, *names: str, default=None):
    """The first positive int of ``names`` in ``config`` or its sub-configs (lists: the first entry)."""
    for current in _configs(config):
        for name in names:
            value = getattr(current, name, None)
            value = value[0] if isinstance(value, (list, tuple)) and value else value
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return default


def _image_size(config) -> tuple[int, int]:
    """Height and width of the images a config is built for: ``image_size`` as one side or as (h, w)
    (MGP-STR's 32 × 128 text lines)."""
    for current in _configs(config):
        for name in ("image_size", "img_size"):
            value = getattr(current, name, None)
            if (
                isinstance(value, (list, tuple))
                and len(value) == 2
                and all(isinstance(v, int) for v in value)
            ):
                return value[0], value[1]
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, value
    return 32, 32


def _patch_shape(model: torch.nn.Module) -> tuple[int, ...]:
    """What one patch holds: the input of the patch embedding's (else the model's) first linear map, or
    the block its first convolution reads (channels, then the kernel)."""
    embedding = next((m for name, m in model.named_modules() if "patch_embed" in name), model)
    for module in embedding.modules():
        if isinstance(module, torch.nn.Linear):
            return (module.in_features,)
        if isinstance(module, (torch.nn.Conv2d, torch.nn.Conv3d)):
            return (module.in_channels, *module.kernel_size)
    raise ValueError("no patch embedding")


def _subsampled_bins(model: torch.nn.Module) -> int | None:
    """Mel bins for a subsampler of 2-D convolutions over (time, mel) followed by a linear map (Gemma 4's
    audio): the map's input width over the last convolution's channels, times the convolutions' strides
    along mel; None where the model has no such subsampler."""
    convs: list[torch.nn.Conv2d] = []
    for module in model.modules():
        if isinstance(module, torch.nn.Conv2d):
            convs.append(module)
        elif isinstance(module, torch.nn.Linear) and convs:
            channels = convs[-1].out_channels
            if module.in_features % channels:
                return None
            bins = module.in_features // channels
            for conv in convs:
                bins *= conv.stride[1]
            return bins
    return None


class _Maker:
    """The inputs of one forward signature; ``variant`` 1 picks the second layout where there are two."""

    def __init__(self, model: torch.nn.Module, batch: int, length: int, variant: int):
        self.model, self.config = model, model.config
        self.params = inspect.signature(model.forward).parameters
        self.batch, self.length, self.variant = batch, length, variant
        self.generator = torch.Generator().manual_seed(1)

    def randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator, dtype=torch.float64)

    def tokens(self, vocab: int | None = None, length: int | None = None) -> torch.Tensor:
        vocab = vocab or _find(self.config, "vocab_size", default=128)
        allowed = torch.tensor(sorted(set(range(vocab)) - reserved_tokens(self.config.to_dict())) or [0])
        shape = (self.batch, length or self.length)
        return allowed[torch.randint(0, len(allowed), shape, generator=self.generator)]

    def pixels(self) -> dict[str, torch.Tensor]:
        if any(name in self.params for name in GRIDS):  # a tower fed flattened patches and their grid
            patches = self.batch * GRID[0] * GRID[1] * GRID[2]
            grid = torch.tensor([GRID] * self.batch)
            merge = _find(self.config, "spatial_merge_size", "merge_size", "merge_kernel_size", default=1)
            shape = _patch_shape(self.model)
            shape = shape if self.variant else (torch.tensor(shape).prod().item(),)  # as a conv reads it
            out = {"pixel_values": self.randn(patches, *shape)}
            out |= {name: grid for name in GRIDS if name in self.params}
            return out | {name: torch.tensor([merge] * self.batch) for name in MERGES if name in self.params}
        if "pixel_position_ids" in self.params:  # flattened patches and each one's (x, y) in the image
            side = _find(self.config, "pooling_kernel_size", default=1) * GRID[1]
            grid = torch.stack(torch.meshgrid(torch.arange(side), torch.arange(side), indexing="xy"), -1)
            shape = torch.tensor(_patch_shape(self.model)).prod().item()
            return {
                "pixel_values": self.randn(self.batch, side * side, shape),
                "pixel_position_ids": grid.reshape(1, -1, 2).expand(self.batch, -1, -1),
            }
        if "spatial_shapes" in self.params:  # patches of variable-size images, padded per image
            patches = GRID[1] * GRID[2]
            return {
                "pixel_values": self.randn(
                    self.batch, patches, torch.tensor(_patch_shape(self.model)).prod().item()
                ),
                "spatial_shapes": torch.tensor([GRID[1:]] * self.batch),
                "pixel_attention_mask": torch.ones(self.batch, patches, dtype=torch.long),
            }
        channels = _find(self.config, "num_channels", "in_channels", "in_chans", default=3)
        lists = bool(self.variant and {"image_attention_mask", "pixel_attention_mask"} & set(self.params))
        images = (self.batch, 2) if lists else (self.batch,)
        height, width = self.prompted() or _image_size(self.config)
        out = {"pixel_values": self.randn(*images, channels, height, width)}
        if "target_sizes" in self.params and not lists:  # each image's size in patches (packed towers)
            patch = _find(self.config, "patch_size", default=height)
            out["target_sizes"] = torch.tensor([[height // patch, width // patch]] * self.batch)
        return out

    def prompted(self) -> tuple[int, int] | None:
        """A model given a prompt image beside its image (SegGPT) stacks the two into one input of the
        config's (height, width): each image is half as high; else None."""
        prompt = [n for n, p in self.params.items() if n.endswith("_pixel_values") and p.default is p.empty]
        sizes = (getattr(c, "image_size", None) for c in _configs(self.config))
        size = next((s for s in sizes if isinstance(s, (list, tuple)) and len(s) == 2), None)
        return (size[0] // 2, size[1]) if prompt and size else None

    def patches(self) -> dict[str, torch.Tensor]:
        pixels = self.pixels()
        return {"hidden_states": pixels.pop("pixel_values")} | pixels

    def features(self) -> dict[str, torch.Tensor]:
        """Mel features: as many frames as the encoder's positions cover, or one window of an encoder that
        attends window by window (one attention call, as its projections see the frames)."""
        mel = _find(self.config, "num_mel_bins", "feature_size", "input_feat_size", "n_mels", default=80)
        window = _find(self.config, "n_window")
        frames = 2 * window if window else 2 * _find(self.config, "max_source_positions", default=32)
        if self.variant == 2:  # frames stacked as the first linear map reads them
            mel = next((m.in_features for m in self.model.modules() if isinstance(m, torch.nn.Linear)), mel)
        if self.variant == 3:  # as many as 2-D convolutions reduce to the bins their projection reads
            mel = _subsampled_bins(self.model) or mel
        features = (
            self.randn(self.batch, frames, mel) if self.variant else self.randn(self.batch, mel, frames)
        )
        masks = {
            n: torch.ones(self.batch, frames, dtype=torch.long) for n in FEATURE_MASKS if n in self.params
        }
        if "feature_lens" in self.params:  # an encoder told each recording's length instead
            masks["feature_lens"] = torch.tensor([frames] * self.batch)
        return {"input_features": features} | masks

    def flattened(self) -> dict[str, torch.Tensor]:
        """Pix2Struct's patches: each one's row and column, then its pixels (``patch_embed_hidden_size``)."""
        width = _find(self.config, "patch_embed_hidden_size", default=768)
        places = torch.arange(self.length, dtype=torch.float64)
        grid = torch.stack([places // 4, places % 4], -1).expand(self.batch, -1, -1)
        return {"flattened_patches": torch.cat([grid, self.randn(self.batch, self.length, width)], -1)}

    def values(self) -> dict[str, torch.Tensor]:
        samples = 4000
        return {
            "input_values": self.randn(self.batch, 1, samples)
            if self.variant
            else self.randn(self.batch, samples)
        }

    def videos(self) -> dict[str, torch.Tensor]:
        """Clips of ``num_frames`` frames (the count a video tower's positions are built for)."""
        frames = _find(self.config, "num_frames", default=2)
        image = _Maker(self.model, self.batch, self.length, 0).pixels()["pixel_values"]
        return {"pixel_values_videos": image.unsqueeze(1).expand(-1, frames, *image.shape[1:]).contiguous()}

    def kinds(self) -> dict[str, Callable[[], dict[str, torch.Tensor]]]:
        """The main kinds of input this forward takes, by name."""
        makers = {
            "input_ids": lambda: {"input_ids": self.tokens()},
            "pixel_values": self.pixels,
            "flattened_patches": self.flattened,
            "input_features": self.features,
            "input_values": self.values,
            "pixel_values_videos": self.videos,
        }
        if "pixel_values" in self.params:  # a model of images and videos: its images suffice
            del makers["pixel_values_videos"]
        elif "hidden_states" in self.params and any(name in self.params for name in GRIDS):
            makers["hidden_states"] = self.patches  # a vision tower that names its patches so
        for name, param in self.params.items():  # a tensor the model embeds with its own ``embed_<name>``
            tensor = "Tensor" in str(param.annotation)
            if tensor and (layer := self.embedder(name)) is not None and name not in makers:
                makers[name] = lambda layer=layer, name=name: {name: self.embedded(layer)}
        for name, param in self.params.items():  # states a child of the model reads by the same name
            width = self.reader_width(name) if param.default is inspect.Parameter.empty else None
            if width and name not in makers:
                makers[name] = lambda name=name, width=width: {
                    name: self.randn(self.batch, self.length, width)
                }
        for name, param in self.params.items():  # states a stack inside a model is handed
            if param.default is inspect.Parameter.empty and STATES.search(name) and name not in makers:
                makers[name] = lambda name=name: {name: self.randn(self.batch, self.length, self.width())}
        return {name: maker for name, maker in makers.items() if name in self.params}

    def embedder(self, name: str) -> torch.nn.Module | None:
        """The model's own ``embed_<stem>`` linear map or table reading input ``name`` (a trajectory's
        ``states``, ``actions``, ``returns_to_go``, ``timesteps``: Decision Transformer's)."""
        for child, module in self.model.named_children():
            stem = child.removeprefix("embed_")
            fits = isinstance(module, (torch.nn.Linear, torch.nn.Embedding))
            if child.startswith("embed_") and stem and name.startswith(stem) and fits:
                return module
        return None

    def reader_width(self, name: str) -> int | None:
        """The input width of the model's child whose forward takes ``name`` first (Muse Glimmer's context
        projection reads ``context_hidden_states``): its first linear map's."""
        for child in self.model.children():
            first = next(iter(inspect.signature(child.forward).parameters), None)
            linear = next((m for m in child.modules() if isinstance(m, torch.nn.Linear)), None)
            if first == name and linear is not None:
                return linear.in_features
        return None

    def embedded(self, layer: torch.nn.Module) -> torch.Tensor:
        """Values ``layer`` reads: vectors of its input width, or ids of its table."""
        if isinstance(layer, torch.nn.Embedding):
            return torch.randint(0, layer.num_embeddings, (self.batch, self.length), generator=self.generator)
        return self.randn(self.batch, self.length, layer.in_features)

    def width(self) -> int:
        return _find(self.config, "hidden_size", "d_model", "embed_dim", default=64)

    def companions(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Inputs that go with the main ones: decoder tokens, a q-former's prompt, a language, region
        features (``visual_feats`` of width ``visual_feat_dim``)."""
        out: dict[str, torch.Tensor] = {}
        if "decoder_input_ids" in self.params and getattr(self.config, "is_encoder_decoder", False):
            out["decoder_input_ids"] = self.tokens(_find(self.config, "decoder_vocab_size"), 5)
        if "qformer_input_ids" in self.params:
            qformer = getattr(self.config, "qformer_config", None)
            out["qformer_input_ids"] = self.tokens(getattr(qformer, "vocab_size", None))
        if "bbox" in self.params and "input_ids" in inputs:  # a document model's word boxes
            out["bbox"] = self.boxes(inputs["input_ids"].shape[-1])
        if "lang_ids" in self.params:
            out["lang_ids"] = torch.zeros(self.batch, dtype=torch.long)
        for name in self.params:
            width = _find(self.config, f"{name}_dim", f"{name.removesuffix('s')}_dim")
            if name.startswith("visual_") and width:
                out[name] = self.randn(self.batch, 3, width)
        if "encoder_hidden_states" in self.params and self.cross():
            width = _find(
                self.config, "encoder_hidden_size", "cross_attention_hidden_size", "hidden_size", "d_model"
            )
            out["encoder_hidden_states"] = self.randn(self.batch, 5, width)
        pixels = inputs.get("pixel_values")
        for name, param in self.params.items():  # a prompt image and its mask beside the image (SegGPT)
            prompt = (
                name.endswith("pixel_values") or name.removesuffix("masks") + "pixel_values" in self.params
            )
            if pixels is not None and name not in inputs and param.default is param.empty and prompt:
                out[name] = self.randn(*pixels.shape)
        if "image_attention_mask" in self.params and pixels is not None and pixels.dim() == 5:
            out["image_attention_mask"] = torch.ones(
                self.batch, self.length, pixels.shape[1], dtype=torch.long
            )
        return out

    def boxes(self, length: int) -> torch.Tensor:
        """One box (x0, y0, x1, y1) per token, corners ordered, within the 2-D positions the model embeds."""
        top = min(1000, _find(self.config, "max_2d_position_embeddings", default=1024) - 1)
        corners = torch.randint(0, top, (self.batch, length, 2, 2), generator=self.generator)
        return torch.cat([corners.min(dim=2).values, corners.max(dim=2).values], dim=-1)

    def cross(self) -> bool:
        """Whether this forward is a decoder's (or a q-former's) that reads another stack's states."""
        config = self.config
        reads = getattr(config, "add_cross_attention", False) or getattr(config, "encoder_hidden_size", None)
        return bool(reads) or type(self.model).__name__.endswith("Decoder")


def input_sets(model: torch.nn.Module, batch: int = 2, length: int = 7) -> list[dict[str, torch.Tensor]]:
    """Random inputs to try in turn: every kind the forward takes (text and image towers together; one
    kind of audio) in each layout, then the model's main kind alone in each layout (the capture keeps
    the first set that runs: the one that reaches most towers comes first)."""
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    if isinstance(main, (list, tuple)):  # OneFormer's [pixel_values, task_inputs]: the first is the medium
        main = main[0]
    if main not in params:
        main = next((n for n in ("pixel_values", *AUDIO) if n in params), main)
    kinds = _Maker(model, batch, length, 0).kinds()
    audio = [n for n in AUDIO if n in kinds]
    choices = [main] if main in audio else audio or [None]
    everies = [[n for n in kinds if n not in AUDIO or n == choice] for choice in choices]
    order = [(names, v) for names in everies for v in LAYOUTS] + [([main], v) for v in LAYOUTS]
    sets: list[dict[str, torch.Tensor]] = []
    for names, variant in order:
        # one image or recording: packed patches or windows keep to one attention call, as the
        # projections' inputs do (a batch of several is split per example)
        patches = "hidden_states" in names and any(name in params for name in GRIDS)
        maker = _Maker(model, 1 if set(names) & MEDIA or patches else batch, length, variant)
        makers = maker.kinds()
        inputs: dict[str, torch.Tensor] = {}
        for name in names:
            if name in makers:
                try:
                    inputs |= makers[name]()
                except ValueError:  # no patch embedding to size patches by
                    continue
        if not inputs:
            continue
        inputs |= maker.companions(inputs) | placeholders(model, inputs)
        if "mm_token_type_ids" in params and "input_ids" in inputs:  # which tokens stand for which medium
            inputs["mm_token_type_ids"] = token_types(model.config, inputs["input_ids"])
        if all(_signature(inputs) != _signature(other) for other in sets):
            sets.append(inputs)
    return sets


def _signature(inputs: dict[str, torch.Tensor]) -> tuple:
    return tuple(sorted((name, tuple(value.shape)) for name, value in inputs.items()))
