"""Errors the user can fix: the CLI prints them as one line and exits 2; their kinds, counted over many models."""

import re


class InputError(Exception):
    """Bad input: a path, id, file or model that cannot be scored as given."""


def machine_refusal(err: OSError) -> str:
    """An ``OSError`` as one line: the machine's answer (a disk, a permission), not a defect of ours."""
    where = f"{err.filename}: " if err.filename else ""
    return f"{where}{err.strerror or err}"


def reason_kind(reason: str) -> str:
    """What a failure reason says without the model, file or address it names, so the reasons of many
    models can be counted (``gated repository (HTTP 401)``, ``unsupported model_type 'mamba'``)."""
    text = re.sub(r"^\S+: ", "", reason.strip()).split(";")[0]
    text = re.sub(r"https?://\S+", "<url>", text)
    return re.sub(r"\b\d{4,}\b", "N", text).strip()


def load_refusal(err: BaseException) -> str:
    """Why torch's weights-only loader refused a file, on one line, without the advice torch gives with it
    (to load the file with ``weights_only=False``: that would run whatever the file holds)."""
    import pickle

    text = " ".join(re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(err)).split())
    if isinstance(err, pickle.UnpicklingError):
        found = re.search(r"Unsupported global: GLOBAL (\S+)", text)
        what = found[1][:80] if found else "Python objects"
        return f"it holds {what}, not only tensors, and attngeom never runs what a file holds"
    kept = [part for part in re.split(r"(?<=[.!?])\s+", text) if "weights_only" not in part]
    return " ".join(kept)[:200] or type(err).__name__
