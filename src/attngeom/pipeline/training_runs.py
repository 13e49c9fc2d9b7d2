"""The training runs of a config: settings validated when the DAG is built, and what they produce.

``training: runs:`` lists runs (a name plus overrides of ``defaults:``); ``grid:`` maps settings to lists
of values, one run per combination, named by its values; ``seeds:`` (a count or a list) repeats every run
once per seed as ``<name>-s<seed>``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..artifacts import groups_holding
from ..errors import InputError
from ..runstats.plateau import SMOKE_TEST_STEPS
from ..training.config import RESOURCE_KEYS, dataset_label, make_config
from ..training.inits import REFERENCE

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
    decoder_loss: str | None = None
    """A decoder's loss (``causal`` or ``masked``); None for an encoder."""
    nodes: int = 1
    runs_per_gpu: int = 1
    """More than 1: the run's one GPU is shared with up to ``runs_per_gpu - 1`` other such runs."""
    mps: bool = False
    """The runs sharing the GPU do so under NVIDIA MPS (``attngeom.pipeline.mps``), not time-sliced."""

    def resources(self, slots_per_gpu: int = 1, here: bool = True) -> dict[str, int | str]:
        """The train job's scheduler resources. One node: ``gpu`` (whole GPUs: the local profile's count,
        SLURM's ``--gpus``). Several nodes (SLURM only): one launcher task per node started by the job
        itself through ``mpi`` (srun), and the GPUs per node as ``gres`` (``--gpus`` would count the whole
        job).

        A run that shares its GPU (``runs_per_gpu`` K > 1) runs about K times as long as alone, so its
        ``runtime`` is K times the run's. Run ``here`` (the local profile, which cuts each GPU into
        ``slots_per_gpu`` slots, ``slots_per_gpu(runs)``) it takes no whole GPU but ``gpu_slots``: its
        1/K of one; whole-GPU jobs then count their slots too. Under SLURM it asks for ``gres``
        "gpu:1", a string: Snakemake adds up the numbers of the jobs in a group job but keeps a string
        that they all share, so the K jobs of group ``share_group(run)`` ask for one GPU together (the
        plugin's job step refuses a string ``gpu``; the step gets the job's GRES without asking)."""
        common = {"mem_mb": self.mem_mb, "runtime": self.runtime * self.runs_per_gpu}
        if self.nodes == 1 and self.runs_per_gpu > 1:
            share = {"gpu": 0, "gpu_slots": slots_per_gpu // self.runs_per_gpu} if here else {"gres": "gpu:1"}
            return {**common, **share}
        if self.nodes == 1:
            slots = {"gpu_slots": self.gpus * slots_per_gpu} if here and slots_per_gpu > 1 else {}
            return {**common, "gpu": self.gpus, **slots}
        # tasks_per_gpu 0: the SLURM plugin would otherwise ask for --ntasks-per-gpu=<tasks>
        multi = {"nodes": self.nodes, "tasks": self.nodes, "mpi": "srun", "tasks_per_gpu": 0}
        return {**common, **multi, **({"gres": f"gpu:{self.gpus}"} if self.gpus else {})}


def grid_runs(grid: dict) -> list[dict]:
    """`training: grid:` (setting → list of values) → one run per combination, named by its values. A
    value may be a mapping holding the setting and the settings that go with it (``{dataset: wikipedia,
    character_spacing: true}``), named by the setting's value."""
    keys = list(grid)
    if not keys:
        return []
    options = {
        k: [_grid_value(k, v) for v in (grid[k] if isinstance(grid[k], list) else [grid[k]])] for k in keys
    }
    runs = []
    for combo in itertools.product(*options.values()):
        name = "-".join(
            f"{v[k]}L" if k == "n_layers" else str(v[k]) for k, v in zip(keys, combo, strict=True)
        )
        runs.append({"name": name, **{k: v for value in combo for k, v in value.items()}})
    return runs


def _grid_value(key: str, value: object) -> dict:
    """A grid value as the settings it sets."""
    if not isinstance(value, dict):
        return {key: value}
    if key not in value:
        raise InputError(f"config: training: grid: {key}: the mapping {value} must set {key} itself")
    return value


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
        nodes = int(merged.get("nodes", 1))
        share = _runs_per_gpu(name, merged.get("runs_per_gpu", 1), gpus, nodes)
        runs[name] = TrainingRun(
            name=name,
            settings=settings,
            gpus=gpus,
            # a GPU's share of the CPUs (8 a GPU), so that K shared runs fit the CPUs of one GPU
            threads=int(merged.get("threads", max(1, 8 // share) if gpus else 2)),
            mem_mb=int(merged.get("mem_mb", 32000 if gpus else 4000)),
            runtime=int(merged.get("runtime", 24 * 60 if gpus else 60)),
            dataset=dataset_label(cfg.dataset),
            layers=cfg.n_layers,
            objective=cfg.objective,
            init=cfg.init,
            regularised=cfg.reg_weight != 0,
            decoder_loss=cfg.decoder_loss if cfg.objective == "decoder" else None,
            nodes=nodes,
            runs_per_gpu=share,
            mps=_mps(name, merged.get("mps", False), share),
        )
    return runs


MAX_SLOTS_PER_GPU = 64
"""The most slots a GPU is cut into (one lock file each)."""


def _runs_per_gpu(name: str, value: object, gpus: int, nodes: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SLOTS_PER_GPU:
        raise InputError(
            f"config: training run {name!r}: runs_per_gpu must be a whole number from 1 to "
            f"{MAX_SLOTS_PER_GPU}, not {value!r}"
        )
    if value > 1 and (gpus != 1 or nodes != 1):
        raise InputError(
            f"config: training run {name!r} sets runs_per_gpu: {value} with gpus: {gpus} and nodes: {nodes}; "
            "only runs of one GPU on one node share a GPU: set gpus: 1, or runs_per_gpu: 1 for this run"
        )
    return value


def _mps(name: str, value: object, share: int) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"config: training run {name!r}: mps must be true or false, not {value!r}")
    if value and share == 1:
        raise InputError(
            f"config: training run {name!r} sets mps: true with runs_per_gpu: 1; MPS serves runs that share "
            "a GPU: set runs_per_gpu to 2 or more, or mps: false for this run"
        )
    return value


def slots_per_gpu(runs: Mapping[str, TrainingRun]) -> int:
    """How many slots the local profile cuts each GPU into: the least common multiple of the runs'
    ``runs_per_gpu``, so that a run of K takes a whole number of slots (1/K of the GPU) whatever the
    others' K; 1 when no run shares."""
    values = sorted({run.runs_per_gpu for run in runs.values()})
    slots = math.lcm(*values) if values else 1
    if slots > MAX_SLOTS_PER_GPU:
        raise InputError(
            f"config: training runs set runs_per_gpu {', '.join(map(str, values))}: a GPU would be cut into "
            f"{slots} slots (their least common multiple), more than {MAX_SLOTS_PER_GPU}; use values that "
            "divide one another (e.g. 2, 4, 8)"
        )
    return slots


def share_group(run: TrainingRun) -> str | None:
    """The job group of a run that shares its GPU (SLURM: ``group-components: gpu_share_K=K`` puts K of
    these jobs in one sbatch job with one GPU); None for a run with GPUs of its own."""
    return f"gpu_share_{run.runs_per_gpu}" if run.runs_per_gpu > 1 else None


def share_problem(
    runs: Mapping[str, TrainingRun], components: Mapping[str, int], cores: int | None
) -> str | None:
    """Why a cluster profile would not run K shared runs side by side in one job, or None: each group
    ``gpu_share_K`` needs ``group-components`` K (else every job goes alone and asks for a GPU of its
    own), and K jobs' threads must fit ``cores``, the widest a group job gets (else Snakemake runs them
    one after another)."""
    for run in sorted(runs.values(), key=lambda run: run.name):
        group = share_group(run)
        if group is None:
            continue
        if components.get(group) != run.runs_per_gpu:
            return (
                f"training run {run.name!r} sets runs_per_gpu: {run.runs_per_gpu} and the profile's "
                f"group-components give {group} {components.get(group, 'nothing')}; add "
                f"{group}={run.runs_per_gpu} to group-components (profiles/slurm/config.yaml lists 2 to 8)"
            )
        if cores is not None and run.runs_per_gpu * run.threads > cores:
            return (
                f"training run {run.name!r} sets runs_per_gpu: {run.runs_per_gpu} with threads: {run.threads}, "
                f"more than the {cores} cores a group job gets (the profile's cores) for "
                f"{run.runs_per_gpu} jobs side by side; lower threads to {max(1, cores // run.runs_per_gpu)} "
                "or raise cores"
            )
    return None


def evolution_groups(runs: dict[str, TrainingRun]) -> list[tuple[str, int]]:
    """(dataset, layers) with a random-init run: one evolution figure each (Figures 3, S3, S4)."""
    return sorted({(r.dataset, r.layers) for r in runs.values() if not r.regularised and r.init == REFERENCE})


def trained_objective(run: TrainingRun) -> str:
    """What a run was trained on, as Figure S5 groups runs: ``encoder``, or ``decoder_<loss>`` (a decoder's
    two losses train different models and are never compared)."""
    return run.objective if run.decoder_loss is None else f"{run.objective}_{run.decoder_loss}"


def symmetric_groups(runs: dict[str, TrainingRun]) -> list[tuple[str, int, str]]:
    """(dataset, layers, ``trained_objective``) with both a random run and a run of another init arm
    (``training.inits``): Figure S5 each, every arm in it."""
    plain = [r for r in runs.values() if not r.regularised]
    return sorted(
        {(r.dataset, r.layers, trained_objective(r)) for r in plain if r.init != REFERENCE}
        & {(r.dataset, r.layers, trained_objective(r)) for r in plain if r.init == REFERENCE}
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
            "groups": groups_holding("language"),
        }
        for run in runs.values()
    ]
