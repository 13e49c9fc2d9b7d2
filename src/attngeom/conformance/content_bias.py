"""What the check can see of a form where the module's scores are not seen: the form has a content bias
u in the query bias (``discovered.content_biases``) and a learned per-dimension query scale folded into
W_q (``Found.q_scale``), but outside the attention interface only the projections' outputs are seen, and
the module adds u and multiplies by the scale after them."""

from __future__ import annotations


def seen_part(model, item, layer, record: dict):
    """``layer`` as far as ``record`` shows it: outside the attention interface only the projections'
    outputs are seen, so a query scale the module applies afterwards (Gemma 3n's audio attention), then a
    content bias u it adds (FastSpeech2-Conformer), are taken off the form there."""
    from dataclasses import replace

    import torch

    from ..architectures.discovered import content_biases

    if "q_attn" in record:
        return layer
    module = model.get_submodule(item.path)
    if item.q_scale and item.q_norm is None:
        scale = torch.nn.functional.softplus(getattr(module, item.q_scale).detach().double())
        per_row = scale.repeat(item.n_heads).to(layer.w_q.dtype)
        b_q = None if layer.b_q is None else layer.b_q / per_row
        layer = replace(layer, w_q=layer.w_q / per_row, b_q=b_q)
    name = content_biases(model, [item]).get(item.path)
    if name is None:
        return layer
    u = getattr(module, name).detach().flatten().to(layer.b_q.dtype)
    return replace(layer, b_q=layer.b_q - u)
