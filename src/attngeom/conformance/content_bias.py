"""A relative-position attention's content bias u in the check: the form has it in the query bias
(``discovered.content_biases``), but where the module's scores are not seen, only its projections'
outputs are, and the module adds u after them."""

from __future__ import annotations


def seen_part(model, item, layer, record: dict):
    """``layer`` as far as ``record`` shows it: outside the attention interface only the projections'
    outputs are seen, so a content bias u the module adds to q afterwards is taken off the form there."""
    from dataclasses import replace

    from ..architectures.discovered import content_biases

    name = content_biases(model, [item]).get(item.path)
    if name is None or "q_attn" in record:
        return layer
    u = getattr(model.get_submodule(item.path), name).detach().flatten().to(layer.b_q.dtype)
    return replace(layer, b_q=layer.b_q - u)
