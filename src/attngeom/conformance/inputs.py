"""Random inputs for a tiny model's forward pass: whatever kinds of input its ``forward`` takes."""

from __future__ import annotations

import inspect

import torch

from .tiny import reserved_tokens


def _pixels(config, batch: int, generator: torch.Generator) -> torch.Tensor:
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", 32)
    size = size[0] if isinstance(size, (list, tuple)) else size
    channels = getattr(vision, "num_channels", 3)
    return torch.randn(batch, channels, size, size, generator=generator, dtype=torch.float64)


def _tokens(config, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    text = getattr(config, "text_config", None)
    vocab = getattr(config, "vocab_size", None) or getattr(text, "vocab_size", None) or 128
    allowed = torch.tensor(sorted(set(range(vocab)) - reserved_tokens(config.to_dict())))
    return allowed[torch.randint(0, len(allowed), (batch, length), generator=generator)]


def input_sets(model: torch.nn.Module, batch: int = 2, length: int = 7) -> list[dict[str, torch.Tensor]]:
    """Random inputs to try in turn: every kind the forward takes (text and image towers together), then
    the model's main kind alone (token ids, pixels, audio features or samples)."""
    config = model.config
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    if main not in params:
        main = next((n for n in ("pixel_values", "input_features", "input_values") if n in params), main)
    makers = {
        "input_ids": lambda g: _tokens(config, batch, length, g),
        "pixel_values": lambda g: _pixels(config, batch, g),
        "input_features": lambda g: torch.randn(
            batch,
            getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 80),
            2 * getattr(config, "max_source_positions", 32),
            generator=g,
            dtype=torch.float64,
        ),
        "input_values": lambda g: torch.randn(batch, 4000, generator=g, dtype=torch.float64),
    }
    sets = []
    for names in ([n for n in makers if n in params], [main]):
        generator = torch.Generator().manual_seed(1)
        inputs = {n: makers[n](generator) for n in names if n in makers}
        if (
            "input_ids" in inputs
            and "decoder_input_ids" in params
            and getattr(config, "is_encoder_decoder", False)
        ):
            inputs["decoder_input_ids"] = inputs["input_ids"][:, :5]
        if inputs and all(set(inputs) != set(other) for other in sets):
            sets.append(inputs)
    return sets
