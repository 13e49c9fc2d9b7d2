"""The second tiny config of a type refused with fewer kv heads than heads: as many as heads where its
defaults have as many (a model may read one count where the other is meant)."""

from __future__ import annotations

from .relations import equal_heads
from .tiny import _repaired


def equal_heads_config(config):
    """``config`` (a tiny one) with as many kv heads as heads wherever its defaults have as many (a model
    may read one count where the other is meant: Moonshine Streaming's q, Granite Speech 5's grouping);
    None where that changes nothing or does not build."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[config.model_type]
    entries = config.to_dict()
    kept = equal_heads(entries, cls().to_dict())
    if kept == entries:
        return None
    try:
        return _repaired(cls.from_dict(kept))
    except Exception:  # noqa: BLE001 — no second config: the first one's result stands
        return None
