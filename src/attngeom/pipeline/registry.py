"""The model registry: config entries become models with a reversible slug, a weight source and resources.

Pure Python with no network and no weights read, so building the DAG stays fast; the Snakefile, the
scripts and the tests all read the registry through this module.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..files import slug
from ..packaged import package_dir
from .random_models import check_in_child

RANDOM_N_PARAMS = 10_000_000
"""Size assumed for a random control when estimating resources (they are tiny by design)."""


@dataclass(frozen=True)
class Model:
    """One entry of the registry, normalised."""

    id: str
    display: str
    modality: str
    objective: str
    family: str
    role: str
    groups: tuple[str, ...]
    kind: str  # hub | path | random | trained
    location: str  # hub id, local path, or the directory a rule builds
    revision: str | None = None
    n_params: int | None = None
    random: dict = field(default_factory=dict)
    seed: int = 0

    @functools.cached_property
    def slug(self) -> str:
        return slug(self.id)

    def source(self, portable: Callable[[str], str]) -> dict:
        """Where the model's weights are read from (rule model_source's record): a Hub id and the commit
        it is pinned to, or a local path as ``portable`` writes it (no path of this machine)."""
        location = self.location if self.kind == "hub" else portable(self.location)
        return {"model": self.id, "kind": self.kind, "location": location, "revision": self.revision}

    def table_row(self) -> dict:
        """What the tables need to know of the model (``groups`` a list)."""
        return {
            "model": self.id,
            "display": self.display,
            "family": self.family,
            "modality": self.modality,
            "objective": self.objective,
            "role": self.role,
            "groups": list(self.groups),
            "n_params": self.n_params,
            "slug": self.slug,
        }


def results_folder(value: str) -> str:
    """The config's ``results:`` folder, unless it would put ``models/``, ``scores/``, ... at the
    filesystem's root (``results: ""`` or ``"/"``)."""
    if (
        not isinstance(value, str)
        or not value.strip()
        or Path(value).resolve() == Path(value).resolve().parent
    ):
        raise InputError(
            f"config: results: {value!r} would put every output at the filesystem's root; "
            "name a folder such as results"
        )
    return value


def _location(entry: dict, results: str) -> tuple[str, str]:
    if "random" in entry:
        return "random", f"{results}/models/random/{slug(entry['id'])}"
    if "training_dir" in entry:
        return "trained", str(entry["training_dir"])
    if "package" in entry:
        try:
            folder = package_dir(entry["package"])
        except InputError as err:
            raise InputError(f"config: model {entry['id']!r}: {err}, or remove the model") from None
        return "path", str(folder / entry.get("path", ""))
    if "path" in entry:
        return "path", str(entry["path"])
    return "hub", str(entry.get("hub", entry["id"]))


def _n_params(entry: dict) -> int | None:
    value = entry.get("n_params")
    if not value:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise InputError(
            f"config: model {entry['id']!r}: n_params: {value!r} must be a number ≥ 0 (or left out)"
        )
    return int(value)


def _label(entry: dict) -> str:
    """The model's label in tables and figures: one line of printable text (a line break would split its
    row of a Markdown table in two)."""
    label = entry.get("display") or entry["id"].rsplit("/", 1)[-1]
    if not isinstance(label, str) or not label.isprintable():
        raise InputError(
            f"config: model {entry['id']!r}: display {label!r} is not one line of text; give a one-line label"
        )
    return label


def _checked_id(entry: dict) -> None:
    """A model id that makes a file name (no empty path component), or a config refusal naming it."""
    try:
        slug(entry["id"])
    except InputError as err:
        raise InputError(f"config: {err}; give the model an id such as org/name") from None


def build_registry(entries: list[dict], results: str) -> dict[str, Model]:
    """Models by slug, in config order; rejects duplicate ids and slugs and unknown random settings."""
    models: dict[str, Model] = {}
    for entry in entries:
        _checked_id(entry)
        kind, location = _location(entry, results)
        random = dict(entry.get("random", {}))
        model = Model(
            id=entry["id"],
            display=_label(entry),
            modality=entry.get("modality", "language"),
            objective=entry["objective"],
            family=entry.get("family") or entry["id"].split("/")[0],
            role=entry.get("role", "random" if kind == "random" else "pretrained"),
            groups=tuple(entry.get("groups", ())),
            kind=kind,
            location=location,
            revision=entry.get("revision"),
            n_params=_n_params(entry),
            random=random,
            seed=int(entry.get("seed", 0)),
        )
        if model.slug in models:
            raise InputError(f"config: model {model.id!r} is listed twice")
        models[model.slug] = model
    check_in_child({model.id: model.random for model in models.values() if model.random})
    return models


def weights_input(model: Model) -> list[str]:
    """Local weights as a job's input, so a change re-runs it (a folder a rule builds, so that rule runs
    first); none for hub models, and none for a `path:` that does not exist: the score job records that
    model as failed (outcome.py) instead of Snakemake refusing the whole DAG."""
    if model.kind == "hub" or (model.kind == "path" and not Path(model.location).exists()):
        return []
    return [model.location]


def heatmaps(figures: dict, models: dict[str, Model]) -> dict[str, tuple[Model, int | None]]:
    """The heatmap panels of Figure 2 (role → model and layer; None: the model's most representative
    layer, chosen from its scores); a panel naming no model of the config is an error, not a panel
    silently left out."""
    panels = {}
    for role, ref in (figures.get("heatmap") or {}).items():
        model = models.get(slug(ref["model"]))
        if model is None:
            known = ", ".join(m.id for m in models.values())
            raise InputError(
                f"config: figures: heatmap: {role}: model {ref['model']!r} is not in models ({known})"
            )
        layer = ref.get("layer")
        panels[role] = (model, None if layer is None else int(layer))
    return panels


def weight_bytes(model: Model) -> int:
    """Rough size of the weights to read: file sizes for local models, 2 bytes/parameter otherwise."""
    if model.kind == "path":
        path = Path(model.location)
        if path.is_file():
            return path.stat().st_size
        if path.is_dir():
            return sum(
                p.stat().st_size for p in path.iterdir() if p.suffix in {".safetensors", ".bin", ".gguf"}
            )
    if model.n_params:
        return 2 * model.n_params
    return 2 * RANDOM_N_PARAMS


@dataclass(frozen=True)
class Resources:
    threads: int
    mem_mb: int
    runtime: int  # minutes
    disk_mb: int
    gpu: int


def score_resources(model: Model, scoring: dict) -> Resources:
    """Scoring reads only q/k tensors, but a shard is held in memory while read: budget half the weights."""
    size_mb = weight_bytes(model) / 2**20
    params = model.n_params or weight_bytes(model) / 2
    use_gpu = scoring["device"] == "cuda" or (
        scoring["device"] == "auto" and params >= float(scoring["gpu_min_params"])
    )
    return Resources(
        threads=1 if params < 1e9 else int(scoring["max_threads"]),
        mem_mb=int(min(2048 + size_mb * 0.5, scoring["max_mem_mb"])),
        runtime=int(10 + math.ceil(size_mb / 1024) * 2),
        disk_mb=int(1024 + (size_mb if model.kind == "hub" else 0)),
        gpu=1 if use_gpu else 0,
    )
