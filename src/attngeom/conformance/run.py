"""Run the conformance of every ``model_type`` of the installed transformers and write ``support.json``.

Each type ends as ``table`` (a hand-written map, checked by ``tests/test_arch_*.py``), ``validated``
(discovered, and the tiny model's forward pass agrees head by head; where that pass does not run or reach
an attention module, the module's own forward, ``modules``, and the entry's ``own_forward`` names those
stacks) or ``refused`` with its reason.
``python -m attngeom.conformance.run [OUT] [--jobs N] [--types a,b]`` (default OUT: the packaged file).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import tempfile
from multiprocessing import get_context
from pathlib import Path

from ..architectures.discovery.attention import LAYOUTS
from ..architectures.discovery.documented import parent_of
from ..architectures.discovery.validated import SUPPORT_FILE
from .entries import refused as _refused
from .entries import short as _short
from .faults import ObservationError
from .mechanisms import no_attention_reason as _no_attention_reason

TIMEOUT_S = 120
"""Longer, a type is refused with a TimeoutError (a slow machine's verdict: the full-run test skips it)."""


def check_type(model_type: str) -> dict:
    """The conformance entry of one ``model_type``: ``table`` where the registry has one, else discovery's."""
    from ..architectures.registry import REGISTRY

    if model_type in REGISTRY:
        table = REGISTRY[model_type]
        return {"status": "table", "reason": table.why, "stacks": list(table.stacks)}
    return check_discovery(model_type)[0]


def check_discovery(model_type: str) -> tuple[dict, object, str]:
    """Discovery's conformance entry of ``model_type`` (a table or not), with the tiny config it was
    checked on and the checkpoint class built (empty: the base model); no config where none was."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from .refusals import sub_config_class, undefined_base

    undefined = undefined_base(model_type)
    if (model_type not in MODEL_MAPPING_NAMES or undefined) and (parent := parent_of(model_type, undefined)):
        alone = None if undefined else _alone(model_type)
        if alone is not None:
            return alone
        why = f" (transformers defines no {MODEL_MAPPING_NAMES[model_type]} of its own)" if undefined else ""
        return _refused(f"a sub-config, scored through its parent `{parent}`{why}"), None, ""
    if model_type not in MODEL_MAPPING_NAMES and (why := sub_config_class(model_type)):
        return _refused(why), None, ""
    return _discovered(model_type)


def _alone(model_type: str) -> tuple[dict, object, str] | None:
    """A sub-config's entry where transformers gives it a model class of its own and discovery validates
    that model (a checkpoint of the tower alone: CLIP's text model, SigLIP's); else None."""
    from ..architectures.discovery.model_classes import own_model_class

    try:
        if own_model_class(model_type) is None:
            return None
    except Exception:  # noqa: BLE001 — no class to find: scored through its parent
        return None
    found = _discovered(model_type)
    return found if found[0]["status"] == "validated" else None


def _discovered(model_type: str) -> tuple[dict, object, str]:
    """``check_discovery`` of a type whose model is checked (not one scored through its parent)."""
    from .refusals import build_refusal, correlation_of
    from .tiny import equal_heads_config, optional_towers, tiny_config

    try:
        from ..architectures.discovery.attention import meta_model

        config = tiny_config(model_type)
        skeleton = meta_model(config)
    except Exception as err:  # noqa: BLE001 — any failure is this type's result
        why = _default_reason(model_type) or build_refusal(err) or _source_reason(model_type)
        why = why or _default_failure(model_type)
        return _refused(why or f"could not build a tiny model ({_short(err)})"), None, ""
    if not _has_attention(skeleton, config):
        config, skeleton = _deepened(config, skeleton)
    name = ""
    if not _has_attention(skeleton, config):
        name, skeleton = _checkpoint_with_attention(model_type, config) or (name, skeleton)
    if not _has_attention(skeleton, config):
        return _refused(_no_attention_reason(skeleton)), None, ""
    if correlation := correlation_of(skeleton, config):
        return _refused(correlation), None, ""
    entry = _check(model_type, config, name)
    if entry["status"] == "refused" and (mha := equal_heads_config(config)) is not None:
        retried = _check(model_type, mha, name)  # a model reading the head count where the kv count is meant
        if retried["status"] == "validated":
            return retried, mha, name
    if entry["status"] == "validated" and (towers := optional_towers(model_type)):
        return _with_towers(model_type, entry, config, name, towers)
    return entry, config, name


def _with_towers(
    model_type: str, entry: dict, config, name: str, towers: list[str]
) -> tuple[dict, object, str]:
    """The entry of ``model_type`` validated also on tiny configs that build its ``towers`` (optional
    sub-configs its defaults leave unset: Gemma 4's vision and audio towers), one tower at a time, each
    holding every module the default config does and the tower's: what each validated joins the entry
    (``merged``); a tower that does not validate stays unscored, the reason saying why."""
    from .tiny import tiny_config

    kept: dict[str, object] = {}  # tower → the tiny config that validated it
    why: list[str] = []
    for tower in towers:
        try:
            towered = tiny_config(model_type, (tower,))
            found = _check(model_type, towered, name)
        except Exception as err:  # noqa: BLE001 — this tower's reason; the rest stays validated
            found = _refused(f"no tiny config builds it ({_short(err)})")
        if found["status"] == "validated" and found.get("layout", "") == entry.get("layout", ""):
            entry, kept[tower] = merged(entry, found), towered
        else:
            why.append(f"its `{tower}` tower not validated: {found['reason']}")
    if len(kept) > 1:
        config = tiny_config(model_type, tuple(kept))
    elif kept:
        config = next(iter(kept.values()))
    if kept:  # the stacks of the model with its towers (a lone stack named by the objective is renamed)
        stacks = _stacks(config, entry)
        named = {
            key: [s for s in entry.get(key, ()) if s in stacks] for key in ("causal_stacks", "own_forward")
        }
        entry = {k: v for k, v in entry.items() if k not in named} | {k: v for k, v in named.items() if v}
        entry |= {"stacks": stacks}
    return entry | {"reason": "; ".join([entry["reason"], *why])}, config, name


def merged(entry: dict, tower: dict) -> dict:
    """A validated ``entry`` with what the validation of a config with one more tower observed: the
    tower's modules' kinds, templates and stacks joined to its own, the labels of the model with it."""
    joined = {
        key: sorted(set(entry.get(key, ())) | set(tower.get(key, ())))
        for key in ("cross", "self_kinds", "unscaled", "score_bias", "softcap", "templates")
    }
    lists = {
        key: list(dict.fromkeys([*entry.get(key, ()), *tower.get(key, ())]))
        for key in ("causal_stacks", "own_forward")
    }
    labels = {key: tower[key] for key in ("modality", "objective", "reason")}
    return entry | {k: v for k, v in (joined | lists).items() if v} | labels


def _stacks(config, entry: dict) -> list[str]:
    """The stacks discovery gives ``config`` with what ``entry`` observed."""
    from ..architectures.discovery.discovered import discover
    from ..architectures.discovery.observed import Observed

    return list(discover(config, entry.get("layout", ""), Observed.of(entry)).stacks)


def _checkpoint_with_attention(model_type: str, config):
    """Where the base model has no attention, the first checkpoint class (``...For...``) whose model has
    (PP-OCRv5's text recognisers: a convolutional backbone, attention blocks in the head), by name, with
    its meta-device model; else None."""
    from ..architectures.discovery.attention import meta_model
    from ..architectures.discovery.model_classes import checkpoint_classes

    for cls in checkpoint_classes(model_type):
        try:
            skeleton = meta_model(config, cls.__name__)
        except Exception:  # noqa: BLE001 — a head this config does not build: the next
            continue
        if _has_attention(skeleton, config):
            return cls.__name__, skeleton
    return None


def tiny_model(model_type: str, config, name: str = ""):
    """The random float64 model of ``model_type`` built from the tiny ``config`` (``name``: a checkpoint
    class to build instead of the base model), the same for the same arguments."""
    from transformers import AutoModel
    from transformers.initialization import no_init_weights

    from ..architectures.discovery.attention import model_class
    from .check import randomized

    with no_init_weights():
        cls = model_class(model_type, name)
        return randomized(cls.from_config(config) if cls is AutoModel else cls._from_config(config))


def _check(model_type: str, config, name: str = "") -> dict:
    """The entry of ``model_type``'s model built from the tiny ``config`` (``name``: a checkpoint class
    to build instead of the base model)."""
    from .attempt import attempt

    try:
        model = tiny_model(model_type, config, name)
    except Exception as err:  # noqa: BLE001
        return _refused(f"could not build a tiny model ({_short(err)})")
    with tempfile.TemporaryDirectory() as folder:
        try:
            model.save_pretrained(folder)
            source = open_source_for(folder)
        except Exception as err:  # noqa: BLE001
            return _refused(f"could not save the tiny model ({_short(err)})")
        separate = attempt(model, config, source, "", name)
        complete = "not scored" not in separate["reason"] and "fused" not in separate["reason"]
        if separate["status"] == "validated" and complete:
            return separate
        tried = [separate]
        for layout in LAYOUTS if _fused(model, config) else ():
            tried.append(attempt(model, config, source, layout, name))
            if tried[-1]["status"] == "validated":
                return tried[-1] | {"layout": layout}
        if separate["status"] == "validated":
            return separate
        near = next((r for r in tried if r.get("near")), None)
        ran = next((r for r in tried[1:] if r["reason"].startswith("could not run")), None)
        if near is None and ran is not None and "layout not discovered" in separate["reason"]:
            return ran  # a layout was found, the forward pass that would choose it failed: say why
        return near or separate


def _fused(model, config) -> bool:
    """Whether ``model`` has fused q/k/v projections, which only a layout reads (else trying the layouts
    repeats the attempt without one)."""
    from ..architectures.discovery.attention import Found, find_attention

    try:
        return any(isinstance(i, Found) and i.fused for i in find_attention(model, config, LAYOUTS[0]))
    except Exception:  # noqa: BLE001 — a layout discovery refuses: the attempts say why
        return True


def _default_reason(model_type: str) -> str | None:
    """The no-attention reason of the default-size model on the meta device, where that builds and has none."""
    from transformers import CONFIG_MAPPING

    from ..architectures.discovery.attention import meta_model

    try:
        config = CONFIG_MAPPING[model_type]()
        skeleton = meta_model(config)
    except Exception:  # noqa: BLE001
        return None
    return None if _has_attention(skeleton, config) else _no_attention_reason(skeleton)


def _source_reason(model_type: str) -> str | None:
    """Where no model of the type builds: "no dot-product attention" when its modeling code names no
    attention but in its outputs' class names (``...WithNoAttention``) and each sub-model its default
    config names builds without any (PP-OCRv5's detector: convolutions over an HGNetV2 backbone)."""
    from transformers import CONFIG_MAPPING

    from .unset import modeling_source

    text = modeling_source(model_type).replace("WithNoAttention", "")
    if not text or re.search(r"attention|attn|softmax", text, re.IGNORECASE):
        return None
    try:
        entries = CONFIG_MAPPING[model_type]().to_dict()
    except Exception:  # noqa: BLE001
        return None
    subs = [v["model_type"] for v in entries.values() if isinstance(v, dict) and "model_type" in v]
    if not all((_default_reason(sub) or "").startswith("no dot-product attention") for sub in subs):
        return None
    parts = f", nor do its sub-models ({', '.join(f'`{s}`' for s in subs)})" if subs else ""
    return f"no dot-product attention (its modeling code computes none{parts})"


def _default_failure(model_type: str) -> str | None:
    """Where transformers' own default config does not build its model either (a default left unset that
    the model needs), the refusal saying so; else None."""
    from transformers import CONFIG_MAPPING

    from ..architectures.discovery.attention import meta_model

    try:
        meta_model(CONFIG_MAPPING[model_type]())
    except Exception as err:  # noqa: BLE001
        return f"transformers' default config of it does not build its model either ({_short(err)})"
    return None


def _deepened(config, skeleton):
    """``config`` with the fewest more layers (up to 6) whose model has attention, where the shrunk
    layer count keeps only layers without it (Griffin's recurrent blocks come before its attention
    block; SAM 3 Lite's text encoder has RepMixers first and last); else ``config`` as it was."""
    import copy

    from ..architectures.discovery.attention import meta_model

    layers = getattr(config, "num_hidden_layers", None)
    for more in range(layers + 1, 7) if isinstance(layers, int) else ():
        deeper = copy.deepcopy(config)
        deeper.num_hidden_layers = more
        try:
            built = meta_model(deeper)
        except Exception:  # noqa: BLE001 — a count the config's rules refuse: try the next
            continue
        if _has_attention(built, deeper):
            return deeper, built
    return config, skeleton


def _has_attention(skeleton, config) -> bool:
    """Whether discovery sees any attention in the meta-device model (an unreadable one counts)."""
    from ..architectures.discovery.attention import Found, find_attention

    try:
        return any(
            isinstance(i, Found)
            for layout in ("", "blocks")
            for i in find_attention(skeleton, config, layout)
        )
    except Exception:  # noqa: BLE001 — the full attempt reports it
        return True


def open_source_for(folder: str):
    from ..sources import open_source

    return open_source(Path(folder))


def _worker(model_type: str) -> tuple[str, dict]:
    import resource

    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()
    start = resource.getrusage(resource.RUSAGE_SELF).ru_utime

    def expired(signum, frame):
        raise TimeoutError(f"over {TIMEOUT_S} s")

    signal.signal(signal.SIGALRM, expired)
    signal.alarm(TIMEOUT_S)
    try:
        entry = check_type(model_type)
        return model_type, entry | {"cpu_s": resource.getrusage(resource.RUSAGE_SELF).ru_utime - start}
    except ObservationError as err:  # a defect of the run, never the model's: the run fails
        raise ObservationError(f"{model_type}: {err}") from None
    except Exception as err:  # noqa: BLE001
        return model_type, _refused(f"could not run the tiny model ({_short(err)})")
    finally:
        signal.alarm(0)


def all_model_types() -> list[str]:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return sorted(CONFIG_MAPPING_NAMES)


def run_all(types: list[str], jobs: int, progress: bool = False) -> dict[str, dict]:
    """The entries of ``types``, checked in ``jobs`` processes (each type in a fresh state)."""
    work = list(types)
    if jobs <= 1:
        return {t: {k: v for k, v in e.items() if k != "cpu_s"} for t, e in map(_worker, work)}
    results: dict[str, dict] = {}
    cpu: dict[str, float] = {}
    with get_context("spawn").Pool(jobs, maxtasksperchild=200) as pool:
        for model_type, entry in pool.imap_unordered(_worker, work, chunksize=1):
            results[model_type] = entry
            cpu[model_type] = entry.pop("cpu_s", 0.0)
            if progress:
                print(
                    f"{len(results)}/{len(work)} {model_type}: {entry['status']} {cpu[model_type]:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    if progress:
        slowest = sorted(cpu, key=cpu.get, reverse=True)[:10]
        print(
            f"CPU time {sum(cpu.values()):.0f} s; slowest: {[(t, round(cpu[t])) for t in slowest]}",
            file=sys.stderr,
        )
    return results


def document(results: dict[str, dict]) -> str:
    import transformers

    body = {"transformers": transformers.__version__, "types": dict(sorted(results.items()))}
    return json.dumps(body, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    from ..files import write_text

    parser = argparse.ArgumentParser(prog="python -m attngeom.conformance.run")
    parser.add_argument(
        "out",
        nargs="?",
        type=Path,
        help=f"where to write (default: the packaged {SUPPORT_FILE.name}; with --types and neither OUT nor "
        "--update, the types' results are printed and nothing is written)",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--types", default="", help="comma-separated model types (default: all)")
    parser.add_argument("--update", action="store_true", help="keep OUT's other entries (with --types)")
    args = parser.parse_args(argv)
    types = [t for t in re.split(r"[,\s]+", args.types) if t] or all_model_types()
    results = run_all(types, args.jobs, progress=True)
    if args.types and args.out is None and not args.update:  # a look at some types: the table stays whole
        print(document(results), end="")
        return 0
    out = args.out or SUPPORT_FILE
    if args.update and out.exists():
        results = json.loads(out.read_text())["types"] | results
    write_text(out, document(results))
    counts = {s: sum(r["status"] == s for r in results.values()) for s in ("table", "validated", "refused")}
    print(f"{len(results)} model types: {counts}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
