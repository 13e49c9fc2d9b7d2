"""Table 1: final loss and the speed-up of each init arm over its reference, over seeds, with three tests.

**Rows.** Per comparison group (runs that differ only in init and seed: ``pairing.comparison_key``), one
row per init with its final loss over seeds, and, for an init compared with another
(``training.inits``: every arm with ``random``, the authors' symmetric init also with its scale control), one row per such comparison: the speed-ups over the seed pairs (seed s vs seed s,
``pairing.twins``) with a 95% t-interval (``intervals``), what the comparison measures (``effect``), the
loss gap at the horizon, and the tests of ``significance`` on the signed speed-up (candidate over reference
minus reference over candidate, 0 in expectation when init does not matter): the t-test with its minimum
detectable effect at 80% power, the exact sign-flip test and Wilcoxon's signed-rank test, with the least p
an exact test can give with that many seeds. For scale, the null: the signed speed-up of random-vs-random
pairs of different seeds, disjoint pairs so that they are independent (``pairing.seed_pairs``).

**Beside them**: where a row compares the authors' own init (``inits.AUTHORS``, their ``--symmetric-init``)
with ``random``, the paper's printed numbers (same depth and dataset) and the authors' own runs cut at the
row's horizon and at the end of their schedule (``authors.at_horizon``). Other inits (those without a
``papers_name``) have no run of the authors' to be set beside.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..training.bookkeeping import read_loss_log
from ..training.config import TrainConfig
from ..training.inits import ARM, AUTHORS, EFFECTS, INITS, REFERENCE
from ..training.runs import RunInfo
from . import authors
from .intervals import mean_interval, prediction_interval
from .pairing import comparison_key, seed_pairs, twins
from .plateau import plateau_exits
from .significance import (
    ALPHA,
    least_exact_p,
    minimum_detectable_effect,
    sign_flip_test,
    t_test,
    wilcoxon_test,
)
from .speedup import (
    CLAIM_RULE,
    RULES,
    censored,
    common_horizon,
    final_loss,
    loss_gap,
    paper_speedup,
    signed_speedup,
    speedup,
)

NULL = "null: random vs random (other seed)"
T_TEST, SIGN_FLIP, WILCOXON = "t-test", "sign-flip test", "Wilcoxon signed-rank test"
NOISE, FASTER, SLOWER = (
    "not distinguishable from seed noise",
    "faster than seed noise",
    "slower than seed noise",
)

PAIR_COLUMNS = [
    "comparison", "effect", "reference", "candidate", "reference_init", "candidate_init", "reference_seed",
    "candidate_seed", "steps", *(f"speedup_{rule}" for rule in RULES), "speedup_paper",
    f"censored_{CLAIM_RULE}", f"signed_{CLAIM_RULE}", "loss_gap",
]  # fmt: skip


def twin_label(candidate_init: str, reference_init: str) -> str:
    """How a comparison of two inits of the same seed is named: "symmetric vs random (same seed)"."""
    return f"{candidate_init} vs {reference_init} (same seed)"


def pair_speedups(losses: Mapping[str, pd.DataFrame], configs: Mapping[str, TrainConfig]) -> pd.DataFrame:
    """One row per compared pair of runs (the twins of every comparison and the random-vs-random null
    pairs): the speed-up by both rules and the paper's formula, whether the candidate is censored by the
    claim rule, the signed speed-up the tests use, the loss gap at the horizon, and the steps compared."""
    pairs = [
        (twin_label(t.candidate_init, t.reference_init), t.effect, t.reference, t.candidate)
        for t in twins(configs)
    ]
    pairs += [(NULL, "seed noise", p.reference, p.other) for p in seed_pairs(configs)]
    rows = []
    for comparison, effect, reference, candidate in pairs:
        ref, cand = losses[reference], losses[candidate]
        rows.append(
            {
                "comparison": comparison,
                "effect": effect,
                "reference": reference,
                "candidate": candidate,
                "reference_init": configs[reference].init,
                "candidate_init": configs[candidate].init,
                "reference_seed": configs[reference].seed,
                "candidate_seed": configs[candidate].seed,
                "steps": common_horizon(ref, cand),
                **{f"speedup_{rule}": speedup(ref, cand, rule=rule) for rule in RULES},
                "speedup_paper": paper_speedup(ref, cand),
                f"censored_{CLAIM_RULE}": censored(ref, cand, rule=CLAIM_RULE),
                f"signed_{CLAIM_RULE}": signed_speedup(ref, cand, rule=CLAIM_RULE),
                "loss_gap": loss_gap(ref, cand),
            }
        )
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def verdict(signed: np.ndarray, p: float, test: str = T_TEST) -> str:
    """What ``test`` (its p-value ``p``) says of the signed speed-ups over seeds, naming the test; an
    exact test that cannot reach ``ALPHA`` with this many seeds says so."""
    n = len(signed)
    if n == 0:
        return ""
    if n < 2:
        return "one seed: no test"
    if test != T_TEST and least_exact_p(n) >= ALPHA:
        return f"cannot reach alpha {ALPHA:g} with {n} seeds ({test}: p ≥ 2/2^{n} = {least_exact_p(n):.4g})"
    if not p < ALPHA:
        return f"{NOISE} ({test})"
    return f"{FASTER if np.mean(signed) > 0 else SLOWER} ({test})"


def _tests(name: str, values: np.ndarray) -> dict[str, float]:
    """The three tests' p-values of ``values`` (mean 0?) as ``<name>_p_t``, ``_p_sign_flip``, ``_p_wilcoxon``
    (each NaN with fewer than 2 values)."""
    return {
        f"{name}_p_t": float(t_test(values)),
        f"{name}_p_sign_flip": sign_flip_test(values),
        f"{name}_p_wilcoxon": wilcoxon_test(values),
    }


PREDICTED = (f"speedup_{CLAIM_RULE}", "loss_gap")
"""Columns with a 95% prediction interval for one new seed pair too (``_pred_low``/``_pred_high``): the
yardstick for the authors' single run."""
SPEEDUP_NAMES = (*(f"speedup_{rule}" for rule in RULES), "speedup_paper", "signed", "null", "loss_gap")
TEST_COLUMNS = [
    f"{name}_p_{test}" for name in ("signed", "loss_gap") for test in ("t", "sign_flip", "wilcoxon")
]
NO_SPEEDUP = {
    "reference": "",
    "effect": "",
    **{f"{name}{end}": np.nan for name in SPEEDUP_NAMES for end in ("", "_low", "_high")},
    "censored": 0,
    **{f"{name}_pred_{end}": np.nan for name in PREDICTED for end in ("low", "high")},
    **dict.fromkeys(TEST_COLUMNS, np.nan),
    "least_exact_p": np.nan,
    "mde": np.nan,
    "seed_pairs": 0,
    "null_pairs": 0,
    "verdict": "",
    "verdict_exact": "",
}
"""The speed-up columns of a row that has none (the reference inits, regularised runs)."""


def _speedup_columns(twinned: pd.DataFrame, null: pd.DataFrame) -> dict[str, object]:
    """A compared row's speed-up columns from its seed pairs and its group's null pairs."""
    row: dict[str, object] = {}
    for name in (*(f"speedup_{rule}" for rule in RULES), "speedup_paper", "loss_gap"):
        row |= mean_interval(twinned[name]).columns(name)
    for name in PREDICTED:
        predicted = prediction_interval(twinned[name])
        row |= {f"{name}_pred_low": predicted.low, f"{name}_pred_high": predicted.high}
    signed = twinned[f"signed_{CLAIM_RULE}"].to_numpy(dtype=float)
    tests = _tests("signed", signed) | _tests("loss_gap", twinned["loss_gap"].to_numpy(dtype=float))
    sd = float(np.std(signed, ddof=1)) if len(signed) > 1 else np.nan
    return row | {
        **mean_interval(signed).columns("signed"),
        **mean_interval(null[f"signed_{CLAIM_RULE}"]).columns("null"),
        "censored": int(twinned[f"censored_{CLAIM_RULE}"].sum()),
        **tests,
        "least_exact_p": least_exact_p(len(signed)),
        "mde": minimum_detectable_effect(sd, len(signed)),
        "seed_pairs": len(twinned),
        "null_pairs": len(null),
        "verdict": verdict(signed, tests["signed_p_t"]),
        "verdict_exact": verdict(signed, tests["signed_p_sign_flip"], SIGN_FLIP),
    }


def _plateau_columns(level: float | None, exits: list[int | None]) -> dict[str, float]:
    """When the runs reached their group's plateau exit level (``plateau.plateau_exits``): the level,
    the earliest and latest step over seeds, and how many reached it."""
    reached = [e for e in exits if e is not None]
    return {
        "plateau_level": np.nan if level is None else level,
        "plateau_exit_low": min(reached, default=np.nan),
        "plateau_exit_high": max(reached, default=np.nan),
        "plateau_left": len(reached),
    }


def _order(table: pd.DataFrame) -> pd.DataFrame:
    rank = {init: i for i, init in enumerate(INITS)}
    keys = {"init": table["init"].map(rank), "reference": table["reference"].map(lambda r: rank.get(r, -1))}
    return table.sort_values(
        ["layers", "characters", "dataset", "objective", "reg_weight", "init", "reference"],
        key=lambda column: keys.get(column.name, column),
    ).reset_index(drop=True)


def _check_same_tokens(names: list[str], infos: Mapping[str, RunInfo]) -> None:
    """Runs compared with each other (same settings, their files compared by name) read the same token ids,
    where their corpus.json says which."""
    digests = {infos[n].tokens_sha256: n for n in names if infos[n].tokens_sha256}
    if len(digests) > 1:
        first, second = list(digests.values())[:2]
        raise ValueError(
            f"runs {first} and {second} have the same settings but read different tokens (corpus.json's "
            "tokens_sha256): give their corpora different file names, or compare them in separate reports"
        )


def summarise(
    losses: Mapping[str, pd.DataFrame],
    configs: Mapping[str, TrainConfig],
    paper: pd.DataFrame | None = None,
    authors_logs: pd.DataFrame | None = None,
    infos: Mapping[str, RunInfo] | None = None,
) -> pd.DataFrame:
    """Table 1 from loss logs and configs by run name: per comparison group and init, the final loss over
    seeds, and per comparison the speed-ups, the tests and the null (``pair_speedups``); beside rows that
    compare a symmetric init with random, the paper's numbers and the authors' at the row's horizon.
    ``infos`` (read from the run folders) adds what data the runs saw to their ``differs_from_paper`` and
    what they read instead of the paper's corpus (``corpus_note``, from their corpus.json)."""
    pairs = pair_speedups(losses, configs)
    keys = {name: comparison_key(config) for name, config in configs.items()}
    pairs["key"] = pairs["reference"].map(keys)
    groups: dict[tuple, dict[str, list[str]]] = {}
    for name, config in sorted(configs.items()):
        groups.setdefault(keys[name], {}).setdefault(config.init, []).append(name)
    rows = []
    for key, by_init in groups.items():
        everyone = [n for names in by_init.values() for n in names]
        if infos:
            _check_same_tokens(everyone, infos)
        level, exits = plateau_exits([losses[n] for n in everyone])
        exit_of = dict(zip(everyone, exits, strict=True))
        null = pairs[(pairs["comparison"] == NULL) & (pairs["key"] == key)]
        for init, names in by_init.items():
            first = configs[names[0]]
            info = infos[names[0]] if infos else RunInfo(names[0], first)
            labels = info.labels()
            del labels["seed"]
            row = {
                **labels,
                "run": ", ".join(names),
                "seeds": len(names),
                "steps": min(int(losses[n]["step"].max()) for n in names),
                "corpus_note": info.substitute,
                **mean_interval(final_loss(losses[n]) for n in names).columns("final_loss"),
                **_plateau_columns(level, [exit_of[n] for n in names]),
                **NO_SPEEDUP,
            }
            compared = []
            for reference in (r for c, r in EFFECTS if c == init and r in by_init):
                twinned = pairs[(pairs["candidate"].isin(names)) & (pairs["reference_init"] == reference)]
                if twinned.empty:
                    continue
                found = row | {"reference": reference, "effect": EFFECTS[init, reference]}
                found |= _speedup_columns(twinned, null)
                if authors_logs is not None and init == AUTHORS and reference == REFERENCE:
                    horizon = int(twinned["steps"].min())
                    found |= authors.at_horizon(
                        authors_logs,
                        first.n_layers,
                        first.objective,
                        row["dataset"],
                        row["characters"],
                        horizon,
                    )
                compared.append(found)
            rows += compared or [row]
    table = pd.DataFrame(rows)
    if paper is not None:
        table = _with_paper(table, paper)
    return _order(table)


def _with_paper(table: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 1 numbers (one run each; its rows by ``InitArm.papers_name``) beside our
    unregularised encoder rows of the same depth, dataset and tokens (its Wikipedia and RedPajama rows were
    trained on characters, Jigsaw on word pieces): its random row beside our random init, its symmetric row
    (the authors' init) beside our rows of that init compared with random."""
    published = paper.rename(columns={"final_loss": "paper_loss", "speedup_percent": "paper_speedup_percent"})
    published = published.rename(columns={"init": "paper_init"})
    paper_init = np.where(
        (table["init"] == AUTHORS) & (table["reference"] == REFERENCE),
        ARM[AUTHORS].papers_name,
        np.where(table["init"] == REFERENCE, ARM[REFERENCE].papers_name, ""),
    )
    same_tokens = table["dataset"].isin(authors.CHARACTER_DATASETS) == table["characters"]
    comparable = (
        (table["objective"] == "encoder") & (table["reg_weight"] == 0) & (paper_init != "") & same_tokens
    )
    merged = table[comparable].assign(paper_init=paper_init[comparable])
    merged = merged.merge(published, on=["layers", "dataset", "paper_init"], how="left")
    return pd.concat([merged.drop(columns="paper_init"), table[~comparable]], ignore_index=True)


def table1(
    runs: list[Path], paper: pd.DataFrame | None = None, authors_logs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Table 1 (``summarise``) of run folders."""
    infos = [RunInfo.read(run) for run in runs]
    losses = {i.name: read_loss_log(run / "loss.parquet") for i, run in zip(infos, runs, strict=True)}
    by_name = {i.name: i for i in infos}
    return summarise(losses, {i.name: i.config for i in infos}, paper, authors_logs, by_name)
