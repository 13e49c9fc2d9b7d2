"""Which runs are compared with which (Table 1, Figure S5): runs that differ only in ``init`` and ``seed``
form one comparison group; within it a run of another init is paired with the random-init run of its seed
(``twins``), and random-init runs of different seeds form the null's disjoint pairs (``seed_pairs``).
Works on configs alone, so the pipeline can call it before any run exists."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..training.config import TrainConfig, dataset_label

BOOKKEEPING = frozenset(
    (
        "log_every",
        "score_every",
        "checkpoint_every",
        "device",
        "precision",
        "compile",
        "deterministic",
        "cache_dir",
    )
)
"""Settings that change how a run is carried out or recorded, not what it learns."""


def learnt(config: TrainConfig, apart_from: tuple[str, ...] = ("init",)) -> dict:
    """What a run learns from, apart from the settings named and the bookkeeping ones."""
    return {k: v for k, v in config.to_dict().items() if k not in apart_from and k not in BOOKKEEPING}


def comparison_key(config: TrainConfig) -> tuple:
    """Runs with the same key differ only in ``init``, ``seed`` and bookkeeping: one row of Table 1."""
    return tuple(sorted(learnt(config, ("init", "seed")).items()))


def _plain(config: TrainConfig, init: str) -> bool:
    return config.init == init and config.reg_weight == 0


@dataclass(frozen=True)
class Twin:
    """A symmetric-init run and the random-init run it is compared with (Table 1, Figure S5)."""

    random: str
    symmetric: str
    dataset: str
    layers: int
    objective: str
    seed: int


def twins(configs: Mapping[str, TrainConfig]) -> list[Twin]:
    """Every unregularised symmetric-init run paired with the random-init run that differs from it
    only in ``init`` (so the same dataset, depth, objective and seed) and in bookkeeping settings; when
    several qualify, the first by name. Works on configs alone, so the pipeline can call it before
    any run exists."""
    randoms = {name: learnt(c) for name, c in sorted(configs.items()) if _plain(c, "random")}
    pairs = []
    for name, config in sorted(configs.items()):
        if not _plain(config, "symmetric"):
            continue
        match = next((r for r, learnt_r in randoms.items() if learnt_r == learnt(config)), None)
        if match is not None:
            label = dataset_label(config.dataset)
            pairs.append(Twin(match, name, label, config.n_layers, config.objective, config.seed))
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
        if _plain(config, "random"):
            groups.setdefault(comparison_key(config), {}).setdefault(config.seed, name)
    pairs = []
    for by_seed in groups.values():
        seeds = sorted(by_seed)
        for first, second in zip(seeds[0::2], seeds[1::2], strict=False):
            pairs.append(SeedPair(by_seed[first], by_seed[second], first, second))
    return pairs
