"""The training runs of a config: settings validated when the DAG is built, and what they produce.

``training: runs:`` lists runs (a name plus overrides of ``defaults:``); ``grid:`` maps settings to lists
of values, one run per combination, named by its values; ``seeds:`` (a count or a list) repeats every run
once per seed as ``<name>-s<seed>``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from ..errors import InputError
from ..training.config import RESOURCE_KEYS, dataset_label, make_config
from ..training.plateau import SMOKE_TEST_STEPS

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
"""A run name is a folder name under results/training: no '/', no leading '.' (so never '..')."""


@dataclass(frozen=True)
class TrainingRun:
    name: str
    settings: dict
    gpus: int
    """GPUs per node; the run has ``max(1, gpus)`` DDP processes on each of its ``nodes``."""
    threads: int
    """CPUs per node."""
    mem_mb: int
    """Memory per node."""
    runtime: int
    dataset: str
    layers: int
    objective: str
    init: str
    regularised: bool
    nodes: int = 1

    def resources(self) -> dict[str, int | str]:
        """The train job's scheduler resources. One node: ``gpu`` (the local profile's GPU slots, SLURM's
        ``--gpus``). Several nodes (SLURM only): one launcher task per node started by the job itself
        through ``mpi`` (srun), and the GPUs per node as ``gres`` (``--gpus`` would count the whole job)."""
        common = {"mem_mb": self.mem_mb, "runtime": self.runtime}
        if self.nodes == 1:
            return {**common, "gpu": self.gpus}
        # tasks_per_gpu 0: the SLURM plugin would otherwise ask for --ntasks-per-gpu=<tasks>
        multi = {"nodes": self.nodes, "tasks": self.nodes, "mpi": "srun", "tasks_per_gpu": 0}
        return {**common, **multi, **({"gres": f"gpu:{self.gpus}"} if self.gpus else {})}


def grid_runs(grid: dict) -> list[dict]:
    """`training: grid:` (setting → list of values) → one run per combination, named by its values."""
    keys = list(grid)
    if not keys:
        return []
    values = itertools.product(*(grid[k] if isinstance(grid[k], list) else [grid[k]] for k in keys))
    return [
        {
            "name": "-".join(
                f"{v}L" if k == "n_layers" else str(v) for k, v in zip(keys, combo, strict=True)
            ),
            **dict(zip(keys, combo, strict=True)),
        }
        for combo in values
    ]


def seeded(entries: list[dict], seeds: int | list[int] | None) -> list[dict]:
    """Each run once per seed, named ``<name>-s<seed>`` with ``seed`` set; unchanged without ``seeds``."""
    if seeds is None:
        return entries
    values = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    out = []
    for entry in entries:
        if "seed" in entry:
            raise InputError(
                f"config: training run {entry.get('name')!r} sets seed, and training: seeds: sets it too; "
                "remove one"
            )
        out += [{**entry, "name": f"{entry.get('name')}-s{seed}", "seed": seed} for seed in values]
    return out


def training_runs(training: dict, results: str) -> dict[str, TrainingRun]:
    """Runs by name; a bad setting or name fails here, before any job starts."""
    defaults = dict(training.get("defaults") or {})
    entries = [*(training.get("runs") or []), *grid_runs(training.get("grid") or {})]
    if "seed" in defaults and training.get("seeds") is not None:
        raise InputError("config: training: defaults sets seed, and training: seeds: sets it too; remove one")
    runs: dict[str, TrainingRun] = {}
    for entry in seeded(entries, training.get("seeds")):
        name = str(entry.get("name"))
        if not RUN_NAME.fullmatch(name):
            raise InputError(
                f"config: training run name {name!r} must be letters, digits, '.', '_' or '-', not "
                "starting with '.' or '-' (it names a folder)"
            )
        if name in runs:
            raise InputError(f"config: training run name {name!r} is used twice")
        merged = {**defaults, **{k: v for k, v in entry.items() if k != "name"}}
        merged.setdefault("cache_dir", f"{results}/cache")
        settings = {k: v for k, v in merged.items() if k not in RESOURCE_KEYS}
        try:
            cfg = make_config(settings)
        except (InputError, TypeError, ValueError) as err:
            raise InputError(f"config: training run {name!r}: {err}") from None
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
            nodes=int(merged.get("nodes", 1)),
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


def trained_model_id(run: str) -> str:
    """The id under which the final model of training run ``run`` is scored (tables, figures)."""
    return f"trained/{run}"


def _display(run: TrainingRun) -> str:
    """The run's name, marked "[smoke test: N steps]" when it is too short to leave the masked-LM plateau
    (``plateau.SMOKE_TEST_STEPS``), so that Tables S2/S3 and Figure 2 do not pass it off as a trained model."""
    steps = int(run.settings.get("steps", 200_000))
    return f"{run.name} [smoke test: {steps:,} steps]" if steps < SMOKE_TEST_STEPS else run.name


def training_models(runs: dict[str, TrainingRun], results: str) -> list[dict]:
    """The trained models as registry entries, so the scoring rules score them like any other model."""
    return [
        {
            "id": trained_model_id(run.name),
            "display": _display(run),
            "training_dir": f"{results}/{run.name}/final",
            "objective": "bidirectional" if run.objective == "encoder" else "autoregressive",
            "family": "BERT",
            "role": "trained",
            "groups": ["table_s2", "table_s3", "figure_2"],
        }
        for run in runs.values()
    ]
