"""Does discovery score a table type as its table does? Both maps read one tiny model, record by record.

For a ``model_type`` with a hand-written table, the conformance's tiny model (``run.check_discovery``:
discovery validated against its forward pass) is saved once and scored twice, by the table and by the
discovered layout, and the records are compared: their keys (stack, layer, head), their labels (modality,
objective, form, left-out terms, shapes) and their numbers (to float64 rounding). A type whose scores
discovery reproduces loses its table unless a label discovery would give is wrong for the checkpoints
people score (each table's ``why`` says why it is kept).
``python -m attngeom.conformance.table_agreement [OUT.json] [--types a,b] [--jobs N]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from multiprocessing import get_context
from pathlib import Path

LABELS = ("modality", "objective", "n_heads", "n_kv_heads", "head_dim", "hidden_size", "left_out", "form")
NUMBERS = ("symmetry", "directionality", "norm")
RTOL, ATOL = 1e-10, 1e-12
"""Two float64 computations of one score from factors equal to rounding agree this closely."""


def records(model_type: str):
    """(the table's records, discovery's records) of ``model_type``'s tiny model, or why discovery has none."""
    import torch

    from ..architectures.discovery.discovered import discover
    from ..architectures.discovery.observed import Observed
    from ..architectures.registry import REGISTRY
    from ..engine import Settings, score_source
    from ..records import to_frame
    from ..sources import open_source
    from .run import check_discovery, tiny_model

    entry, config, name = check_discovery(model_type)
    if entry["status"] != "validated":
        return f"discovery: {entry['reason']}"
    settings = Settings.checked("cpu", torch.float64, "excess", 1e-6)
    with tempfile.TemporaryDirectory() as folder:
        tiny_model(model_type, config, name).save_pretrained(folder)
        source = open_source(Path(folder))
        found = discover(source.config, entry.get("layout", ""), Observed.of(entry))
        frames = [
            to_frame(score_source(source, settings, progress=False, model_id="tiny", architecture=a))
            for a in (REGISTRY[model_type], found)
        ]
    return frames[0], frames[1]


def differences(table, found) -> tuple[list[str], list[str]]:
    """What the records of ``found`` (discovery) say otherwise than ``table``'s: (the scores, the labels).
    The scores differ where a scored record is in one only or a number differs; stacks are matched by their
    layer norms, so a stack discovery names otherwise is a label."""
    import numpy as np

    labels: list[str] = []
    stacks = [list(dict.fromkeys(f["stack"])) for f in (table, found)]
    if stacks[0] != stacks[1]:
        renamed = _renaming(table, found)
        labels.append(f"stacks: {stacks[0]} vs {stacks[1]}")
        if renamed is None:
            unkeyed = _unkeyed(table, found)
            return ([] if unkeyed == EQUAL_UNKEYED else [unkeyed]), labels + ["keys: " + unkeyed]
        found = found.assign(stack=found["stack"].map(renamed))
    key = ["stack", "layer", "head"]
    merged = table.merge(found, on=key, how="outer", suffixes=("_t", "_d"), indicator=True)
    only = merged[merged["_merge"] != "both"]
    if len(only):
        unscored = only[only["norm_t"].isna() & only["norm_d"].isna()]
        said = f"{len(only)} record keys in one only, e.g. {only[key].iloc[0].tolist()}"
        return ([] if len(unscored) == len(only) else [said]), labels + [said]
    for column in ("not_scored", *LABELS):
        a, b = (merged[f"{column}_{s}"].astype("string") for s in "td")
        if column == "left_out":  # a set of terms
            a, b = (x.fillna("").map(lambda t: ",".join(sorted(t.split(",")))) for x in (a, b))
        unequal = a.fillna("") != b.fillna("")
        for (x, y), rows in merged[unequal].groupby([a[unequal].fillna(""), b[unequal].fillna("")]):
            labels.append(f"{column}: {x!r} vs {y!r} ({len(rows)} records)")
    scores: list[str] = []
    for column in NUMBERS:
        a, b = (merged[f"{column}_{s}"].to_numpy(dtype=float, na_value=np.nan) for s in "td")
        if not np.array_equal(np.isnan(a), np.isnan(b)):
            scores.append(f"{column}: null in one only ({int((np.isnan(a) != np.isnan(b)).sum())} records)")
        elif not np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
            scores.append(f"{column}: max |Δ| {np.nanmax(np.abs(a - b)):.3g}")
    return scores, labels


EQUAL_UNKEYED = "the scored records' numbers are equal, keys aside"


def _unkeyed(table, found) -> str:
    """The scored records compared without their keys (stacks that split or join differently)."""
    import numpy as np

    def rows(frame):
        scored = frame[frame["norm"].notna()]
        values = scored[["head_dim", "n_heads", *NUMBERS]].to_numpy(dtype=float, na_value=np.nan)
        return values[np.lexsort(np.round(values[:, ::-1], 9).T)]

    a, b = rows(table), rows(found)
    if a.shape != b.shape:
        return f"{len(a)} vs {len(b)} scored records"
    if np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True):
        return EQUAL_UNKEYED
    return f"scored records differ without keys: max |Δ| {np.nanmax(np.abs(a - b)):.3g}"


def _renaming(table, found) -> dict[str, str] | None:
    """Discovery's stack → the table's stack with the same layer norms (rounded), where each has one."""
    import numpy as np

    def signature(frame, stack: str) -> tuple:
        rows = frame[(frame["stack"] == stack) & frame["head"].isna()].sort_values("layer")
        return tuple(np.round(rows["norm"].to_numpy(dtype=float, na_value=np.nan), 9))

    theirs = {signature(table, s): s for s in dict.fromkeys(table["stack"])}
    renamed = {s: theirs.get(signature(found, s)) for s in dict.fromkeys(found["stack"])}
    if None in renamed.values() or len(set(renamed.values())) != len(renamed):
        return None
    return renamed


def verdict(model_type: str) -> tuple[str, dict]:
    """Per type: ``agrees`` (records equal), ``labels`` (scores equal, labels differ: listed), ``differs``
    (scores differ), ``refused`` (discovery's reason) or ``error``."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    try:
        pair = records(model_type)
    except Exception as err:  # noqa: BLE001 — any failure is this type's result
        return model_type, {"verdict": "error", "why": [f"{type(err).__name__}: {str(err)[:300]}"]}
    if isinstance(pair, str):
        return model_type, {"verdict": "refused", "why": [pair]}
    scores, labels = differences(*pair)
    said = "differs" if scores else "labels" if labels else "agrees"
    return model_type, {"verdict": said, "why": scores + labels}


def main(argv: list[str] | None = None) -> int:
    from ..architectures.registry import REGISTRY
    from ..files import write_text

    parser = argparse.ArgumentParser(prog="python -m attngeom.conformance.table_agreement")
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--types", default="", help="comma-separated table types (default: all)")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    types = [t for t in re.split(r"[,\s]+", args.types) if t] or sorted(REGISTRY)
    results = {}
    with get_context("spawn").Pool(args.jobs, maxtasksperchild=20) as pool:
        for model_type, result in pool.imap_unordered(verdict, types, chunksize=1):
            results[model_type] = result
            print(
                f"{model_type}: {result['verdict']} {'; '.join(result['why'])}", file=sys.stderr, flush=True
            )
    if args.out:
        write_text(args.out, json.dumps(dict(sorted(results.items())), indent=1) + "\n")
    agree = sorted(t for t, r in results.items() if r["verdict"] in ("agrees", "labels"))
    print(f"{len(agree)} of {len(results)} score equally: {','.join(agree)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
