"""Self-supervised speech encoders (wav2vec 2.0 lineage)."""

from __future__ import annotations

from .base import Architecture

ARCHITECTURES: list[Architecture] = []
