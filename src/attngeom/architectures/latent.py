"""Multi-head latent attention (DeepSeek-V2/V3): q and k through low-rank, RMS-normalised latents."""

from __future__ import annotations

from .base import Architecture

ARCHITECTURES: list[Architecture] = []
