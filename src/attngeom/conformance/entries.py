"""The pieces of a conformance entry (``support.json``): a refusal and its reasons' wording."""

from __future__ import annotations

import re

OWN_FORWARD = "the attention modules' own forward"
"""Said by the reason of a type validated (in part) on its attention modules called one by one."""
PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]*")
"""An absolute path in an error message (a temporary folder, the installation): not part of a reason."""


def short(err: BaseException) -> str:
    text = PATH.sub("<path>", " ".join(str(err).split()))
    return f"{type(err).__name__}: {text[:140]}" if text else type(err).__name__


def refused(reason: str, near: bool = False) -> dict:
    """A refusal; ``near``: discovery found a layout, the forward pass disagreed (kept over other reasons)."""
    return {"status": "refused", "reason": reason, "stacks": []} | ({"near": True} if near else {})


def pooled_queries(module) -> str | None:
    """The refusal of an attention that pools its queries (Hiera's and SAM 2's stage changes), else None."""
    stride = getattr(module, "query_stride", None)
    if not any(
        isinstance(s, int) and s > 1 for s in (stride if isinstance(stride, (tuple, list)) else [stride])
    ):
        return None
    return (
        f"query pooling ({type(module).__name__}, `query_stride`): where a stage begins, q is max-pooled "
        "over neighbouring tokens after its projection, so those layers' scores are no bilinear form of a "
        "token pair"
    )


def own_forward_note(unrun: list, whole: Exception | None) -> str:
    """What a validation on the attention modules' own forward says: which stacks, and why not whole."""
    if not unrun:
        return ""
    stacks = ", ".join(f"`{s}`" for s in dict.fromkeys(item.stack for item in unrun))
    why = (
        f"the tiny model's whole forward pass did not run: {short(whole)}"
        if whole is not None
        else "the whole model's forward pass does not run them"
    )
    return f"; {stacks} validated on {OWN_FORWARD} ({why})"
