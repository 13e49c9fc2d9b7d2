"""Table 1: final loss and the speed-up of symmetric over random initialisation, over seeds, with a test.

**The paper's speed-up** (Table 1's caption): (T − t_symmetric) / T, T the total number of steps and
t_symmetric the first step at which the symmetric run reaches the random run's final loss. It assumes the
random run itself first reaches its final loss at its last step: true of a smooth decreasing curve, false
on a noisy plateau, where the first dip below the final value already counts, so a run measured against
itself scores up to ~60%. It is given under its own name (``speedup_paper``), beside two rules that time
both runs alike: speed-up = (t_random − t_symmetric) / T, t the step at which a run's smoothed loss reaches
the random run's final smoothed loss, ``first`` = the first step at or below it, ``robust`` = the first
step after which it stays at or below it. Where the random run first reaches its final loss at its last
step ``first`` is the paper's number; a run against itself gives 0 under both rules for any log. Claims
use ``robust``: one lucky stretch of batches cannot make it.

**Censoring.** A symmetric run that never reaches the target by the last step compared is censored:
its time is "> T", and its speed-up is at most the value shown (the one it would have, had it reached the
target at the last step). The table counts censored pairs; the test below does not lose them.

Losses are smoothed first (a trailing mean over 2% of the log); two logs of different lengths are
compared up to the last step both reached (a run stopped early, say at a deadline).

**Seeds, the test, the null.** Per group of runs that differ only in init and seed
(``runs.comparison_key``): the speed-ups over the seed pairs (symmetric seed s vs random seed s,
``runs.twins``) with a 95% t-interval (``intervals``); the test of ``significance`` on the signed
speed-up (symmetric over random minus random over symmetric, 0 in expectation when init does not matter),
its p-value and the minimum detectable effect at 80% power; and, for scale, the null: the signed speed-up of
random-vs-random pairs of different seeds, disjoint pairs so that they are independent (``runs.seed_pairs``:
3 seeds give one pair). Final losses are likewise a mean ± interval over seeds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from ..report import table_formats
from .config import TrainConfig
from .documents import SUBSTITUTES, split_revision
from .intervals import Interval, mean_interval
from .plateau import plateau_exit
from .runs import RunInfo, comparison_key, dataset_label, seed_pairs, twins
from .significance import ALPHA, minimum_detectable_effect, t_test
from .smoothing import SMOOTHING_FRACTION, smoothed

__all__ = [
    "CLAIM_RULE",
    "RULES",
    "SMOOTHING_FRACTION",
    "TABLE1_CAPTION",
    "TABLE1_TITLE",
    "dataset_label",
    "pair_speedups",
    "paper_speedup",
    "signed_speedup",
    "smoothed",
    "speedup",
    "summarise",
    "table1",
    "table1_display",
    "write_table1",
]
"""``dataset_label`` lives in ``runs``, ``smoothed`` in ``smoothing``; callers still import them from here."""

Rule = Literal["first", "robust"]
RULES: tuple[Rule, ...] = ("first", "robust")
CLAIM_RULE: Rule = "robust"
"""The rule the test, the ``verdict`` column and any claim made from the table use."""

NOISE = "not distinguishable from seed noise"
SYMMETRIC_VS_RANDOM = "symmetric vs random (same seed)"
NULL = "null: random vs random (other seed)"

TABLE1_TITLE = "Table 1: final loss and speed-up of symmetric over random initialisation, over seeds"
TABLE1_CAPTION = (
    "Final loss (smoothed: trailing mean over 2% of the log) and speed-up of symmetric over random "
    "initialisation, per depth, dataset and objective, over seeds (symmetric seed s vs random seed s). "
    "'paper' = the paper's formula, (T − t_symmetric) / T with t_symmetric the first step at which the "
    "symmetric run's smoothed loss reaches the random run's final loss (it also gives a run against itself a "
    "positive value on a noisy plateau); 'robust' = (t_random − t_symmetric) / T with t the first step after "
    "which each run stays at or below that loss (0 for a run against itself). A run that never reaches it "
    "is censored ('> T'): its speed-up is at most the value shown; 'censored' counts such pairs. "
    "Test: two-sided one-sample t-test over seeds, alpha 0.05, of the signed speed-up (robust speed-up of "
    "symmetric over random minus that of random over symmetric, each where positive; 0 in expectation when init makes no "
    "difference, and a slower symmetric run counts as such although censored); p its p-value; MDE the "
    "smallest mean signed speed-up it detects with 80% power given the seeds' spread. Null = the signed "
    "speed-up of random-vs-random pairs of different seeds (disjoint pairs; 3 seeds give one), the spread "
    "seed noise alone makes. Leaves plateau: the step at which each run's loss has fallen a quarter of "
    "the way from its plateau to its final value (from its own log; earliest–latest over seeds). "
    "± and [low, high]: 95% Student-t interval over seeds; with one seed no "
    "interval and no test."
)


def reaches(smooth: pd.DataFrame, target: float, rule: Rule) -> int | None:
    """The step at which a smoothed log reaches ``target`` by ``rule``; None if it never does."""
    below = smooth["loss"].to_numpy() <= target
    steps = smooth["step"].to_numpy()
    if rule == "first":
        hits = np.flatnonzero(below)
        return int(steps[hits[0]]) if len(hits) else None
    if rule == "robust":
        if not below[-1]:
            return None
        above = np.flatnonzero(~below)
        return int(steps[above[-1] + 1]) if len(above) else int(steps[0])
    raise ValueError(f"speed-up rule {rule!r}: choose one of {RULES}")


def _times(
    random: pd.DataFrame, symmetric: pd.DataFrame, window: int | None, rule: Rule
) -> tuple[int, int | None, int]:
    """(t_random, t_symmetric or None if censored, horizon) by ``rule``, up to the last common step."""
    horizon = min(int(random["step"].max()), int(symmetric["step"].max()))
    random, symmetric = (log[log["step"] <= horizon] for log in (random, symmetric))
    if random.empty or symmetric.empty:
        raise ValueError(
            f"the two loss logs share no steps (one ends at step {horizon} before the other starts)"
        )
    window = window or max(1, round(SMOOTHING_FRACTION * len(random)))
    reference, candidate = smoothed(random, window), smoothed(symmetric, window)
    target = reference["loss"].iloc[-1]
    return reaches(reference, target, rule), reaches(candidate, target, rule), horizon


def speedup(
    random: pd.DataFrame, symmetric: pd.DataFrame, window: int | None = None, rule: Rule = "first"
) -> float:
    """Speed-up in percent of ``symmetric`` over ``random`` (any two loss logs: the second is timed
    against the first's final loss), up to the last step both logs reached; a censored run (``censored``)
    is counted as reaching the target at the last step, so the value is an upper bound."""
    t_reference, t_candidate, horizon = _times(random, symmetric, window, rule)
    return 100.0 * (t_reference - (horizon if t_candidate is None else t_candidate)) / horizon


def censored(
    random: pd.DataFrame, symmetric: pd.DataFrame, window: int | None = None, rule: Rule = "first"
) -> bool:
    """Whether ``symmetric`` never reaches ``random``'s final loss by the last common step ("> T")."""
    return _times(random, symmetric, window, rule)[1] is None


def paper_speedup(random: pd.DataFrame, symmetric: pd.DataFrame, window: int | None = None) -> float:
    """The paper's formula, in percent: (T − t_symmetric) / T, t_symmetric the first step at which the
    smoothed symmetric log reaches the random one's final loss (T if never: censored, 0)."""
    _, t_candidate, horizon = _times(random, symmetric, window, "first")
    return 100.0 * (horizon - (horizon if t_candidate is None else t_candidate)) / horizon


def signed_speedup(
    random: pd.DataFrame, symmetric: pd.DataFrame, window: int | None = None, rule: Rule = CLAIM_RULE
) -> float:
    """The test's statistic: the speed-up of ``symmetric`` over ``random`` minus that of ``random`` over
    ``symmetric``, each taken where positive (a censored or slower run gains nothing, rather than an
    upper bound that depends on when the other run flattened out). Swapping the runs flips its sign, so it
    is 0 in expectation when they are exchangeable; a slower symmetric run, censored one way, registers
    the other way."""
    forward, backward = speedup(random, symmetric, window, rule), speedup(symmetric, random, window, rule)
    return max(forward, 0.0) - max(backward, 0.0)


def final_loss(loss: pd.DataFrame) -> float:
    return float(smoothed(loss)["loss"].iloc[-1])


PAIR_COLUMNS = [
    "comparison", "reference", "candidate", "reference_seed", "candidate_seed", "steps",
    *(f"speedup_{rule}" for rule in RULES), "speedup_paper", f"censored_{CLAIM_RULE}", f"signed_{CLAIM_RULE}",
]  # fmt: skip


def pair_speedups(losses: Mapping[str, pd.DataFrame], configs: Mapping[str, TrainConfig]) -> pd.DataFrame:
    """One row per compared pair of runs (the symmetric-vs-random twins and the random-vs-random null
    pairs): the speed-up by both rules and the paper's formula, whether the candidate is censored by the
    claim rule, the signed speed-up the test uses, and the steps compared."""
    pairs = [(SYMMETRIC_VS_RANDOM, t.random, t.symmetric) for t in twins(configs)]
    pairs += [(NULL, p.reference, p.other) for p in seed_pairs(configs)]
    rows = []
    for comparison, reference, candidate in pairs:
        ref, cand = losses[reference], losses[candidate]
        rows.append(
            {
                "comparison": comparison,
                "reference": reference,
                "candidate": candidate,
                "reference_seed": configs[reference].seed,
                "candidate_seed": configs[candidate].seed,
                "steps": min(int(ref["step"].max()), int(cand["step"].max())),
                **{f"speedup_{rule}": speedup(ref, cand, rule=rule) for rule in RULES},
                "speedup_paper": paper_speedup(ref, cand),
                f"censored_{CLAIM_RULE}": censored(ref, cand, rule=CLAIM_RULE),
                f"signed_{CLAIM_RULE}": signed_speedup(ref, cand, rule=CLAIM_RULE),
            }
        )
    return pd.DataFrame(rows, columns=PAIR_COLUMNS)


def verdict(signed: np.ndarray, p: float) -> str:
    """What the test says of the signed speed-ups over seeds."""
    if len(signed) == 0:
        return ""
    if len(signed) < 2:
        return "one seed: no test"
    if not p < ALPHA:
        return NOISE
    return "faster than seed noise" if np.mean(signed) > 0 else "slower than seed noise"


def _interval_columns(name: str, interval: Interval) -> dict[str, float]:
    return {name: interval.mean, f"{name}_low": interval.low, f"{name}_high": interval.high}


SPEEDUP_NAMES = (*(f"speedup_{rule}" for rule in RULES), "speedup_paper", "signed", "null")
NO_SPEEDUP = {
    **{f"{name}{end}": np.nan for name in SPEEDUP_NAMES for end in ("", "_low", "_high")},
    "censored": 0,
    "p_value": np.nan,
    "mde": np.nan,
    "seed_pairs": 0,
    "null_pairs": 0,
    "verdict": "",
}
"""The speed-up columns of a row that has none (random-init, skew or regularised runs)."""


def _speedup_columns(twinned: pd.DataFrame, null: pd.DataFrame) -> dict[str, object]:
    """A symmetric row's speed-up columns from its seed pairs and its group's null pairs."""
    row: dict[str, object] = {}
    for name in (*(f"speedup_{rule}" for rule in RULES), "speedup_paper"):
        row |= _interval_columns(name, mean_interval(twinned[name]))
    signed = twinned[f"signed_{CLAIM_RULE}"].to_numpy(dtype=float)
    p = float(t_test(signed)) if len(signed) > 1 else np.nan
    sd = float(np.std(signed, ddof=1)) if len(signed) > 1 else np.nan
    return row | {
        **_interval_columns("signed", mean_interval(signed)),
        **_interval_columns("null", mean_interval(null[f"signed_{CLAIM_RULE}"])),
        "censored": int(twinned[f"censored_{CLAIM_RULE}"].sum()),
        "p_value": p,
        "mde": minimum_detectable_effect(sd, len(signed)),
        "seed_pairs": len(twinned),
        "null_pairs": len(null),
        "verdict": verdict(signed, p),
    }


def _plateau_columns(logs: list[pd.DataFrame]) -> dict[str, float]:
    """When the runs left the loss plateau (``plateau.plateau_exit``, each from its own log): the
    earliest and latest step over seeds, and how many left it."""
    exits = [e for e in map(plateau_exit, logs) if e is not None]
    return {
        "plateau_exit_low": min(exits, default=np.nan),
        "plateau_exit_high": max(exits, default=np.nan),
        "plateau_left": len(exits),
    }


def summarise(
    losses: Mapping[str, pd.DataFrame], configs: Mapping[str, TrainConfig], paper: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Table 1 from loss logs and configs by run name: one row per group of runs that differ only in
    seed (same dataset, depth, objective, init and every other learnt setting), final loss over seeds,
    and on the symmetric rows the speed-ups, the test and the null (``pair_speedups``)."""
    pairs = pair_speedups(losses, configs)
    keys = {name: comparison_key(config) for name, config in configs.items()}
    pairs["key"] = pairs["reference"].map(keys)
    groups: dict[tuple, list[str]] = {}
    for name, config in sorted(configs.items()):
        groups.setdefault((keys[name], config.init), []).append(name)
    rows = []
    for (key, init), names in groups.items():
        labels = RunInfo(names[0], configs[names[0]]).labels()
        del labels["seed"]
        row = {
            **labels,
            "run": ", ".join(names),
            "seeds": len(names),
            "steps": min(int(losses[n]["step"].max()) for n in names),
            "corpus_note": SUBSTITUTES.get(split_revision(configs[names[0]].dataset)[0], ""),
            **_interval_columns("final_loss", mean_interval(final_loss(losses[n]) for n in names)),
            **_plateau_columns([losses[n] for n in names]),
            **NO_SPEEDUP,
        }
        twinned = pairs[(pairs["comparison"] == SYMMETRIC_VS_RANDOM) & pairs["candidate"].isin(names)]
        null = pairs[(pairs["comparison"] == NULL) & (pairs["key"] == key)]
        if init == "symmetric" and len(twinned):
            row |= _speedup_columns(twinned, null)
        rows.append(row)
    table = pd.DataFrame(rows)
    if paper is not None:
        table = _with_paper(table, paper)
    return table.sort_values(["layers", "dataset", "objective", "reg_weight", "init"]).reset_index(drop=True)


def _with_paper(table: pd.DataFrame, paper: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 1 numbers beside our unregularised encoder rows (it reports no decoders)."""
    published = paper.rename(columns={"final_loss": "paper_loss", "speedup_percent": "paper_speedup_percent"})
    comparable = (table["objective"] == "encoder") & (table["reg_weight"] == 0)
    merged = table[comparable].merge(published, on=["layers", "dataset", "init"], how="left")
    return pd.concat([merged, table[~comparable]], ignore_index=True)


def table1(runs: list[Path], paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 1 (``summarise``) of run folders."""
    infos = [RunInfo.read(run) for run in runs]
    losses = {i.name: pd.read_parquet(run / "loss.parquet") for i, run in zip(infos, runs, strict=True)}
    return summarise(losses, {i.name: i.config for i in infos}, paper)


def table1_display(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 as the paper lays it out (grouped by depth, then dataset), numbers as text with their
    intervals, for Markdown and LaTeX; the CSV keeps ``table``'s numbers."""

    def cells(name: str, count: str, digits: int, style: str) -> list[str]:
        """``name`` with its interval, over ``count`` seeds or pairs, in the ``Interval`` ``style``."""
        found = (
            Interval(row[name], row[f"{name}_low"], row[f"{name}_high"], int(row[count]))
            for _, row in table.iterrows()
        )
        return [getattr(i, style)(digits) if i.n else "" for i in found]

    def censoring() -> list[str]:
        """ "k of n > T" where k of the n symmetric runs never reach the random run's final loss."""
        return [
            f"{int(row['censored'])} of {int(row['seed_pairs'])} > T" if row["seed_pairs"] else ""
            for _, row in table.iterrows()
        ]

    def plateau() -> list[str]:
        """ "802–862" (earliest–latest step at which the seeds left the plateau), "k of n: never"."""
        cells = []
        for _, row in table.iterrows():
            left, never = int(row["plateau_left"]), int(row["seeds"] - row["plateau_left"])
            low, high = row["plateau_exit_low"], row["plateau_exit_high"]
            steps = (f"{low:.0f}" if low == high else f"{low:.0f}–{high:.0f}") if left else ""
            cells.append(
                ", ".join(filter(None, [steps, f"{never} of {row['seeds']}: never" if never else ""]))
            )
        return cells

    def numbers(column: str, text: str) -> list[str]:
        return ["" if pd.isna(v) else text.format(v) for v in table[column]]

    shown = pd.DataFrame(
        {
            "depth": table["layers"].map(lambda n: f"{n}-layer"),
            "dataset": table["dataset"],
            "objective": table["objective"],
            "init": table["init"] + table["reg_weight"].map(lambda w: f" (reg {w:g})" if w else ""),
            "seeds": table["seeds"],
            "steps": table["steps"],
            "final loss": cells("final_loss", "seeds", 3, "plus_minus"),
            "leaves plateau (step)": plateau(),
            f"speed-up % ({CLAIM_RULE})": cells(f"speedup_{CLAIM_RULE}", "seed_pairs", 1, "bracketed"),
            "censored": censoring(),
            "speed-up % (paper's formula)": cells("speedup_paper", "seed_pairs", 1, "bracketed"),
            "signed speed-up %": cells("signed", "seed_pairs", 1, "bracketed"),
            "p": numbers("p_value", "{:.3f}"),
            "MDE % (80% power)": numbers("mde", "{:.1f}"),
            "null (signed) %": [
                c.replace("one seed", "one pair") for c in cells("null", "null_pairs", 1, "bracketed")
            ],
            "verdict": table["verdict"],
        }
    )
    if table["corpus_note"].astype(bool).any():
        shown["corpus (not the paper's snapshot)"] = table["corpus_note"]
    published = (("paper_loss", "paper's loss", 3), ("paper_speedup_percent", "paper's speed-up %", 0))
    for column, title, digits in published:
        if column in table:
            shown[title] = table[column].map(lambda v, d=digits: "" if pd.isna(v) else f"{v:.{d}f}")
    return shown


def write_table1(table: pd.DataFrame, stem: str | os.PathLike) -> None:
    """Table 1 (``summarise``) as ``stem``.csv (every number), .md and .tex (``table1_display``, a block
    per depth as the paper prints it, with the caption)."""
    shown = table1_display(table)
    blocks = [
        table_formats.Block(rows.drop(columns="depth"), f"{depth} models")
        for depth, rows in shown.groupby("depth", sort=False)
    ]
    table_formats.write_table(
        blocks, stem, TABLE1_TITLE, csv=table, caption=TABLE1_CAPTION, empty="No training run."
    )
