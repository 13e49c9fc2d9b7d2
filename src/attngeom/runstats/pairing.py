"""Which runs are compared with which (Table 1, Figure S5): runs that differ only in ``init`` and ``seed``
form one comparison group; within it a run of another init is paired with the run of its seed of each
init it is compared with (``twins``; the comparisons are declared with the arms, ``training.inits``:
every arm against random, the authors' symmetric init also against its scale control), and random-init runs of different seeds form the null's disjoint pairs (``seed_pairs``).
Works on configs alone, so the pipeline can call it before any run exists."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..training.config import TrainConfig, dataset_label
from ..training.inits import EFFECTS, REFERENCE

BOOKKEEPING = frozenset(
    (
        "log_every",
        "score_every",
        "checkpoint_every",
        "device",
        "precision",
        "compile",
        "update_graph",
        "deterministic",
        "attention",
        "cache_dir",
    )
)
"""Settings that change how a run is carried out or recorded, not what it learns (``attention``: the kernel
that computes the same attention, ``auto`` recorded as the one that ran, which a stacked run and a run alone
make differently)."""


LOCAL_FILES = ("dataset", "tokenizer")
"""Settings that may name a local file. Such a file is compared by its name, not the folder it lay in, so
that runs trained on different machines (the same corpus copied to another path) still pair; that their
content agrees is checked where the runs' corpus digests are known (``table1.summarise``)."""


def learnt(config: TrainConfig, apart_from: tuple[str, ...] = ("init",)) -> dict:
    """What a run learns from, apart from the settings named and the bookkeeping ones; a local file by its
    name (``LOCAL_FILES``)."""
    settings = {k: v for k, v in config.to_dict().items() if k not in apart_from and k not in BOOKKEEPING}
    for key in LOCAL_FILES:
        if isinstance(settings.get(key), str) and Path(settings[key]).is_absolute():
            settings[key] = Path(settings[key]).name
    return settings


def comparison_key(config: TrainConfig) -> tuple:
    """Runs with the same key differ only in ``init``, ``seed`` and bookkeeping: one row of Table 1."""
    return tuple(sorted(learnt(config, ("init", "seed")).items()))


def _plain(config: TrainConfig, init: str) -> bool:
    return config.init == init and config.reg_weight == 0


@dataclass(frozen=True)
class Twin:
    """Two unregularised runs of one seed that differ only in ``init``: the ``candidate`` timed against
    the ``reference`` (Table 1, Figure S5); ``effect`` says what the difference of their inits measures."""

    reference: str
    candidate: str
    reference_init: str
    candidate_init: str
    dataset: str
    layers: int
    objective: str
    seed: int

    @property
    def effect(self) -> str:
        return EFFECTS[self.candidate_init, self.reference_init]


def twins(configs: Mapping[str, TrainConfig]) -> list[Twin]:
    """For every comparison of ``EFFECTS``, each unregularised run of the candidate init paired with the
    run of the reference init that differs from it only in ``init`` (so the same dataset, depth,
    objective and seed) and in bookkeeping settings; when several qualify, the first by name. In the
    order of ``EFFECTS``, then by candidate name."""
    pairs = []
    for candidate_init, reference_init in EFFECTS:
        references = {n: learnt(c) for n, c in sorted(configs.items()) if _plain(c, reference_init)}
        for name, config in sorted(configs.items()):
            if not _plain(config, candidate_init):
                continue
            match = next((r for r, settings in references.items() if settings == learnt(config)), None)
            if match is not None:
                label = dataset_label(config.dataset)
                pairs.append(
                    Twin(
                        match,
                        name,
                        reference_init,
                        candidate_init,
                        label,
                        config.n_layers,
                        config.objective,
                        config.seed,
                    )
                )
    return pairs


@dataclass(frozen=True)
class SeedPair:
    """Two unregularised random-init runs that differ only in ``seed``: the null of Table 1, what the
    speed-up statistic gives when nothing but the seed changes."""

    reference: str
    other: str
    reference_seed: int
    other_seed: int


def seed_pairs(configs: Mapping[str, TrainConfig]) -> list[SeedPair]:
    """Within each set of random-init runs that differ only in ``seed`` (one run per seed, the first by
    name), in seed order: disjoint pairs (1st with 2nd, 3rd with 4th, …), so that no run is in two pairs
    and the pairs are independent. With an odd number of seeds the last is in none (3 seeds give one
    pair); with one seed there is no pair."""
    groups: dict[tuple, dict[int, str]] = {}
    for name, config in sorted(configs.items()):
        if _plain(config, REFERENCE):
            groups.setdefault(comparison_key(config), {}).setdefault(config.seed, name)
    pairs = []
    for by_seed in groups.values():
        seeds = sorted(by_seed)
        for first, second in zip(seeds[0::2], seeds[1::2], strict=False):
            pairs.append(SeedPair(by_seed[first], by_seed[second], first, second))
    return pairs
