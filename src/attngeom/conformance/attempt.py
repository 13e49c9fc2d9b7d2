"""One attempt at validating a discovered layout: discover, run the tiny model, observe, compare.

The forward pass (``check.capture``; a module it does not reach on its own forward, ``modules.drive``)
shows what each attention module's queries and keys read and whether its mask is causal (``observe``);
the layout is then discovered again with what was seen (a cross form where the keys read another input)
and every layer read back from the saved files is compared with the q and k the model computed.
"""

from __future__ import annotations

from ..architectures.discovery.stacks import template
from .entries import OWN_FORWARD, own_forward_note, pooled_queries, refused, short


def attempt(model, config, source, layout: str, name: str = "") -> dict:
    """Discover with ``layout`` for fused projections, read the layers from the saved files, compare
    (``name``: the checkpoint class ``model`` is, where it is not the base model)."""
    from dataclasses import replace

    from ..architectures.discovery.attention import Found, find_attention
    from ..architectures.discovery.discovered import discover
    from ..architectures.discovery.observed import Observed
    from .check import capture, compare, compare_latent
    from .mechanisms import no_attention_reason
    from .modules import drive
    from .observe import causal_stacks

    try:
        architecture = discover(config, layout, Observed(model_class=name))
    except Exception as err:  # noqa: BLE001
        reason = str(err) if "no attention module" not in str(err) else no_attention_reason(model)
        return refused(reason)
    items = [i for i in find_attention(model, config, layout) if isinstance(i, Found)]
    pooled = next((p for p in (pooled_queries(model.get_submodule(i.path)) for i in items) if p), None)
    if pooled:
        return refused(pooled, near=True)  # a layout found; the model computes no form of it
    read = _read_back(architecture, source, items)
    if isinstance(read, str):
        return refused(read)
    records, whole = capture(model, items)
    unrun = [item for item in items if item.path not in records]
    driven, failures = drive(model, unrun)
    if failures:
        path, err = next(iter(failures.items()))
        own = f"nor did {path}'s own forward run ({short(err)})"
        if whole is not None:
            return refused(f"could not run the tiny model ({short(whole)}); {own}")
        return refused(f"not validated: {path} never ran in the tiny model's forward pass, {own}", near=True)
    records |= driven
    seen, reads = _observed(model, items, records, set(driven))
    seen = replace(seen, model_class=name)
    items = [i for i in find_attention(model, config, layout, seen) if isinstance(i, Found)]
    causal = set(causal_stacks(items, records, reads))
    seen = replace(seen, causal=frozenset(template(i.path) for i in items if i.stack in causal))  # named so
    architecture = discover(config, layout, seen)
    items = [i for i in find_attention(model, config, layout, seen) if isinstance(i, Found)]
    read = _read_back(architecture, source, items)
    if isinstance(read, str):
        return refused(read)
    pending = iter(read)
    for item in items:
        layer = next(pending)
        if item.latent:
            rope = next(pending) if item.rope else None
            why = compare_latent(layer, rope, records[item.path])
        else:
            why = compare(layer, records[item.path])
        if why:
            own = f" (on {OWN_FORWARD})" if item.path in driven else ""
            return refused(f"not validated{own}: {layer.stack} layer {layer.layer}: {why}", near=True)
    unrun = [item for item in items if item.path in driven]
    entry = {
        "status": "validated",
        "reason": architecture.notes + own_forward_note(unrun, whole),
        "stacks": list(architecture.stacks),
        "modality": architecture.modality,
        "objective": architecture.objective,
    }
    causal = causal_stacks(items, records, reads)
    return (
        entry
        | seen.entry()
        | ({"causal_stacks": causal} if causal else {})
        | ({"own_forward": list(dict.fromkeys(i.stack for i in unrun))} if unrun else {})
    )


def _read_back(architecture, source, items: list) -> list | str:
    """The attention layers of ``architecture`` read from the saved files, or why they cannot be: they do
    not read back, one (stack, layer) record key repeats, or not one layer per form of ``items``."""
    try:
        read = list(architecture.layers(source.config, source))
    except Exception as err:  # noqa: BLE001
        return f"could not read the tiny model's layers back ({short(err)})"
    keys = [(layer.stack, layer.layer) for layer in read]
    if len(set(keys)) != len(keys):
        return f"not validated: record key {next(k for k in keys if keys.count(k) > 1)} repeats"
    layers = [layer for layer in read if hasattr(layer, "w_q")]
    expected = sum(item.forms for item in items)
    if len(layers) != expected:
        return f"not validated: {len(layers)} layers read back, {expected} expected"
    return layers


def _observed(model, items: list, records: dict, driven: set[str]):
    """What the forward pass showed (``observe.observed``), with what each module's keys read (path →
    ``observe.reading``): whether its q and k read one input, seen in the whole forward pass, on a driven
    module's own forward where its signature takes one input only, else as the modules around it call it
    (``modules.reading_as_called``)."""
    from .modules import reading_as_called, takes_states
    from .observe import observed, reading

    reads: dict[str, str | None] = {}
    for item in items:
        record = records[item.path]
        if item.path in driven and takes_states(model.get_submodule(item.path)):
            reads[item.path] = reading_as_called(model, item)
        else:
            reads[item.path] = reading(record["x_q"], record["x_k"])
    return observed(model, items, records, reads), reads
