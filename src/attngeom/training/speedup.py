"""Table 1: final loss and the speed-up of symmetric over random initialisation, over seeds, with a null.

**Speed-up.** The paper's: (total steps − first step at which the symmetric run reaches the random run's
final loss) / total steps. That assumes the random run itself first reaches its final loss at its last
step: true of a smooth decreasing curve, false on a noisy plateau, where the first dip below the final
value already counts, and a run measured against itself scores up to ~60%. So both runs are timed by the
same rule: speed-up = (t_random − t_symmetric) / total, with t the step at which a run's smoothed loss
reaches the random run's final smoothed loss. Where the random run first reaches it at its last step
(t_random = total) this is the paper's number exactly; a run against itself gives 0 for any log; a
symmetric run that is slower gets a negative speed-up; one that never reaches the target is counted as
reaching it at the last step (so its speed-up is at most the value given).

Two rules for t: ``paper``, the first step at which the smoothed loss is at or below the target (the
paper's wording); ``robust``, the first step after which it stays at or below it. Claims (the
``verdict`` column) use the robust rule: one lucky stretch of batches cannot make it.

Losses are smoothed first (a trailing mean over 2% of the log); two logs of different lengths are
compared up to the last step both reached (a run stopped early, say at a deadline).

**Seeds and the null.** Per group of runs that differ only in init and seed (``runs.comparison_key``),
the speed-up is averaged over the seed pairs (symmetric seed s vs random seed s, ``runs.twins``) with a
95% t-interval (``intervals``), and beside it the null: the same statistic for random-vs-random pairs of
different seeds (``runs.seed_pairs``). A speed-up whose interval overlaps the null's is labelled "not
distinguishable from seed noise". Final losses are likewise a mean ± interval over seeds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from .. import tables
from .config import TrainConfig
from .intervals import Interval, mean_interval
from .runs import RunInfo, comparison_key, seed_pairs, twins

__all__ = [
    "CLAIM_RULE",
    "RULES",
    "SMOOTHING_FRACTION",
    "TABLE1_CAPTION",
    "TABLE1_TITLE",
    "pair_speedups",
    "smoothed",
    "speedup",
    "summarise",
    "table1",
    "table1_display",
    "write_table1",
]

SMOOTHING_FRACTION = 0.02
Rule = Literal["paper", "robust"]
RULES: tuple[Rule, ...] = ("paper", "robust")
CLAIM_RULE: Rule = "robust"
"""The rule the ``verdict`` column (and any claim made from the table) uses."""

NOISE = "not distinguishable from seed noise"
SYMMETRIC_VS_RANDOM = "symmetric vs random (same seed)"
NULL = "null: random vs random (other seed)"

TABLE1_TITLE = "Table 1: final loss and speed-up of symmetric over random initialisation, over seeds"
TABLE1_CAPTION = (
    "Final loss (smoothed: trailing mean over 2% of the log) and speed-up of symmetric over "
    "random initialisation, per depth, dataset and objective. Speed-up (%) = (t_random − t_symmetric) / "
    "total steps, t = when the run's smoothed loss reaches the random run's final loss: 'paper' = the first "
    "step at or below it (the paper's definition), 'robust' = the first step after which it stays at or "
    "below it. Mean over seed pairs (symmetric seed s vs random seed s); null = the same statistic for "
    "random-vs-random pairs of different seeds. ± and [low, high]: 95% Student-t interval over seeds "
    "(with 2 seeds its half-width is 9.0 standard deviations, with 3 seeds 2.5); with one seed no interval "
    "can be computed. The verdict uses the robust speed-up: 'not distinguishable from seed noise' when its "
    "interval overlaps the null's."
)


def smoothed(loss: pd.DataFrame, window: int | None = None) -> pd.DataFrame:
    """The loss log sorted by step, ``loss`` replaced by its trailing mean over ``window`` rows (default
    2% of the log; fewer at the start). Each mean is summed on its own, in the same order for every log,
    so a log that is nowhere higher than another is nowhere higher once smoothed, to the last bit."""
    frame = loss.sort_values("step", kind="stable").reset_index(drop=True)
    window = window or max(1, round(SMOOTHING_FRACTION * len(frame)))
    values = np.concatenate([np.zeros(window - 1), frame["loss"].to_numpy(dtype=float)])
    sums = sliding_window_view(values, window).sum(axis=1)
    return frame.assign(loss=sums / np.minimum(np.arange(1, len(frame) + 1), window))


def reaches(smooth: pd.DataFrame, target: float, rule: Rule) -> int | None:
    """The step at which a smoothed log reaches ``target`` by ``rule``; None if it never does."""
    below = smooth["loss"].to_numpy() <= target
    steps = smooth["step"].to_numpy()
    if rule == "paper":
        hits = np.flatnonzero(below)
        return int(steps[hits[0]]) if len(hits) else None
    if rule == "robust":
        if not below[-1]:
            return None
        above = np.flatnonzero(~below)
        return int(steps[above[-1] + 1]) if len(above) else int(steps[0])
    raise ValueError(f"speed-up rule {rule!r}: choose one of {RULES}")


def speedup(
    random: pd.DataFrame, symmetric: pd.DataFrame, window: int | None = None, rule: Rule = "paper"
) -> float:
    """Speed-up in percent of ``symmetric`` over ``random`` (any two loss logs: the second is timed
    against the first's final loss), up to the last step both logs reached."""
    horizon = min(int(random["step"].max()), int(symmetric["step"].max()))
    random, symmetric = (log[log["step"] <= horizon] for log in (random, symmetric))
    if random.empty or symmetric.empty:
        raise ValueError(
            f"the two loss logs share no steps (one ends at step {horizon} before the other starts)"
        )
    window = window or max(1, round(SMOOTHING_FRACTION * len(random)))
    reference, candidate = smoothed(random, window), smoothed(symmetric, window)
    target = reference["loss"].iloc[-1]
    t_reference = reaches(reference, target, rule)
    t_candidate = reaches(candidate, target, rule)
    if t_candidate is None:
        t_candidate = horizon
    return 100.0 * (t_reference - t_candidate) / horizon


def final_loss(loss: pd.DataFrame) -> float:
    return float(smoothed(loss)["loss"].iloc[-1])


def pair_speedups(losses: Mapping[str, pd.DataFrame], configs: Mapping[str, TrainConfig]) -> pd.DataFrame:
    """One row per compared pair of runs (the symmetric-vs-random twins and the random-vs-random null
    pairs), with the speed-up by both rules and the steps compared."""
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
            }
        )
    columns = ["comparison", "reference", "candidate", "reference_seed", "candidate_seed", "steps"]
    return pd.DataFrame(rows, columns=[*columns, *(f"speedup_{rule}" for rule in RULES)])


def verdict(speed: Interval, null: Interval) -> str:
    """What the speed-up interval says against the null's."""
    if speed.n == 0:
        return ""
    if not speed.computable:
        return "one seed: no interval, no verdict"
    if not null.computable:
        return "no null: needs random-init runs of 2 or more seeds"
    if speed.overlaps(null):
        return NOISE
    return "faster than seed noise" if speed.low > null.high else "slower than seed noise"


def _interval_columns(name: str, interval: Interval) -> dict[str, float]:
    return {name: interval.mean, f"{name}_low": interval.low, f"{name}_high": interval.high}


NO_SPEEDUP = {
    **{
        f"{kind}_{rule}{end}": np.nan
        for kind in ("speedup", "null")
        for rule in RULES
        for end in ("", "_low", "_high")
    },
    "seed_pairs": 0,
    "null_pairs": 0,
    "verdict": "",
}
"""The speed-up columns of a row that has none (random-init, skew or regularised runs)."""


def summarise(
    losses: Mapping[str, pd.DataFrame], configs: Mapping[str, TrainConfig], paper: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Table 1 from loss logs and configs by run name: one row per group of runs that differ only in
    seed (same dataset, depth, objective, init and every other learnt setting), final loss over seeds,
    and on the symmetric rows the speed-up and the null (``pair_speedups``) with intervals."""
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
            **_interval_columns("final_loss", mean_interval(final_loss(losses[n]) for n in names)),
            **NO_SPEEDUP,
        }
        twinned = pairs[(pairs["comparison"] == SYMMETRIC_VS_RANDOM) & pairs["candidate"].isin(names)]
        null = pairs[(pairs["comparison"] == NULL) & (pairs["key"] == key)]
        if init == "symmetric" and len(twinned):
            for rule in RULES:
                row |= _interval_columns(f"speedup_{rule}", mean_interval(twinned[f"speedup_{rule}"]))
                row |= _interval_columns(f"null_{rule}", mean_interval(null[f"speedup_{rule}"]))
            claim = f"speedup_{CLAIM_RULE}"
            row |= {
                "seed_pairs": len(twinned),
                "null_pairs": len(null),
                "verdict": verdict(mean_interval(twinned[claim]), mean_interval(null[claim])),
            }
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

    shown = pd.DataFrame(
        {
            "depth": table["layers"].map(lambda n: f"{n}-layer"),
            "dataset": table["dataset"],
            "objective": table["objective"],
            "init": table["init"] + table["reg_weight"].map(lambda w: f" (reg {w:g})" if w else ""),
            "seeds": table["seeds"],
            "steps": table["steps"],
            "final loss": cells("final_loss", "seeds", 3, "plus_minus"),
            f"speed-up % ({CLAIM_RULE})": cells(f"speedup_{CLAIM_RULE}", "seed_pairs", 1, "bracketed"),
            f"null % ({CLAIM_RULE})": cells(f"null_{CLAIM_RULE}", "null_pairs", 1, "bracketed"),
            "verdict": table["verdict"],
            "speed-up % (paper)": cells("speedup_paper", "seed_pairs", 1, "bracketed"),
            "null % (paper)": cells("null_paper", "null_pairs", 1, "bracketed"),
        }
    )
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
        tables.Block(rows.drop(columns="depth"), f"{depth} models")
        for depth, rows in shown.groupby("depth", sort=False)
    ]
    tables.write_table(
        blocks, stem, TABLE1_TITLE, csv=table, caption=TABLE1_CAPTION, empty="No training run."
    )
