"""Vision transformers: patch-token encoders and image decoders."""

from __future__ import annotations

from .base import Architecture

ARCHITECTURES: list[Architecture] = []
