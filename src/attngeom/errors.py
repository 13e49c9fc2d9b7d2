"""Errors the user can fix: the CLI prints them as one line and exits 2; their kinds, counted over many models."""

import re


class InputError(Exception):
    """Bad input: a path, id, file or model that cannot be scored as given."""


def reason_kind(reason: str) -> str:
    """What a failure reason says without the model, file or address it names, so the reasons of many
    models can be counted (``gated repository (HTTP 401)``, ``unsupported model_type 'mamba'``)."""
    text = re.sub(r"^\S+: ", "", reason.strip()).split(";")[0]
    text = re.sub(r"https?://\S+", "<url>", text)
    return re.sub(r"\b\d{4,}\b", "N", text).strip()
