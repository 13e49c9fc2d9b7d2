"""The training runs of a config: settings validated when the DAG is built, and what they produce.

Plain Python (no Snakemake names), so the rules in ``workflow/rules/training.smk`` stay declarations.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from attngeom.training.config import RESOURCE_KEYS, make_config
from attngeom.training.speedup import dataset_label


@dataclass(frozen=True)
class TrainingRun:
    name: str
    settings: dict
    gpus: int
    threads: int
    mem_mb: int
    runtime: int
    dataset: str
    layers: int
    objective: str
    init: str
    regularised: bool


def grid_runs(grid: dict):
    """`training: grid:` (setting → list of values) → one run per combination, named by its values."""
    keys = list(grid)
    if not keys:
        return
    for values in itertools.product(*(grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys)):
        label = "-".join(f"{v}L" if k == "n_layers" else str(v) for k, v in zip(keys, values, strict=True))
        yield {"name": label, **dict(zip(keys, values, strict=True))}


def training_runs(training: dict, results: str) -> dict[str, TrainingRun]:
    """Runs by name; a bad setting fails here, before any job starts."""
    defaults = dict(training.get("defaults") or {})
    runs: dict[str, TrainingRun] = {}
    for entry in [*(training.get("runs") or []), *grid_runs(training.get("grid") or {})]:
        name = entry.get("name")
        if not name or "/" in str(name) or name in runs:
            raise ValueError(f"config: training run name {name!r} is missing, has '/', or is used twice")
        merged = {**defaults, **{k: v for k, v in entry.items() if k != "name"}}
        merged.setdefault("cache_dir", f"{results}/cache")
        settings = {k: v for k, v in merged.items() if k not in RESOURCE_KEYS}
        try:
            cfg = make_config(settings)
        except ValueError as err:
            raise ValueError(f"config: training run {name!r}: {err}") from None
        gpus = int(merged.get("gpus", 1 if cfg.device == "cuda" else 0))
        runs[name] = TrainingRun(
            name=name,
            settings=settings,
            gpus=gpus,
            threads=int(merged.get("threads", 8 if gpus else 2)),
            mem_mb=int(merged.get("mem_mb", 32000 if gpus else 4000)),
            runtime=int(merged.get("runtime", 24 * 60 if gpus else 60)),
            dataset=dataset_label(cfg.dataset),
            layers=cfg.n_layers,
            objective=cfg.objective,
            init=cfg.init,
            regularised=cfg.reg_weight != 0,
        )
    return runs


def evolution_groups(runs: dict[str, TrainingRun]) -> list[tuple[str, int]]:
    """(dataset, layers) with a random-init run: one evolution figure each (Figures 3, S3, S4)."""
    return sorted({(r.dataset, r.layers) for r in runs.values() if not r.regularised and r.init == "random"})


def symmetric_groups(runs: dict[str, TrainingRun]) -> list[tuple[str, int, str]]:
    """(dataset, layers, objective) with both a random and a symmetric run: Figure S5 each."""
    plain = [r for r in runs.values() if not r.regularised]
    return sorted(
        {(r.dataset, r.layers, r.objective) for r in plain if r.init == "symmetric"}
        & {(r.dataset, r.layers, r.objective) for r in plain if r.init == "random"}
    )


def training_outputs(runs: dict[str, TrainingRun], results: str) -> list[str]:
    """Final artifacts of the training part, for the pipeline's `all` rule."""
    if not runs:
        return []
    tables = [
        f"{results}/tables/{t}.{ext}"
        for t in ("table_1", "official_comparison")
        for ext in ("csv", "md", "tex")
    ]
    stems = [f"{results}/figures/evolution_{d}_{n}L" for d, n in evolution_groups(runs)]
    stems += [f"{results}/figures/symmetric_init_{d}_{n}L_{o}" for d, n, o in symmetric_groups(runs)]
    stems += [f"{results}/figures/official_comparison"] if evolution_groups(runs) else []
    finals = [f"{results}/{name}/final" for name in runs]
    return finals + tables + [f"{stem}.{ext}" for stem in stems for ext in ("pdf", "png")]


def training_models(runs: dict[str, TrainingRun], results: str) -> list[dict]:
    """The trained models as registry entries, so the scoring rules score them like any other model."""
    return [
        {
            "id": f"trained/{run.name}",
            "display": run.name,
            "training_dir": f"{results}/{run.name}/final",
            "objective": "bidirectional" if run.objective == "encoder" else "autoregressive",
            "family": "BERT",
            "role": "trained",
            "groups": ["table_s2", "table_s3", "figure_2"],
        }
        for run in runs.values()
    ]
