"""The loss gap of symmetric over random init, per step and seed, from a folder of paired training runs.

Runs are named ``<prefix>-random-s<seed>`` and ``<prefix>-symmetric-s<seed>``; seed s of one init is paired
with seed s of the other (same documents in the same order, the same dropout stream). Writes, into the
folder: ``loss_gap.csv`` (step, seed, gap of the per-step loss, and its mean over the last ``--window``
steps) up to the step every run reached, and ``loss_gap_summary.csv`` (every ``--every`` steps: the mean
of the smoothed gap over seeds and its 95% t-interval), and ``loss_gap.{pdf,png}`` (that mean and band
over the training steps, each seed's smoothed gap as a thin line). Negative: the symmetric run's loss is
lower.

    python benchmarks/loss_gap.py benchmarks/results/training_repro_paper_recipe
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from attngeom.runstats.intervals import t_975

NAME = re.compile(r"(?P<prefix>.+)-(?P<init>random|symmetric)-s(?P<seed>\d+)")


def loss_gap(folder: Path, window: int) -> pd.DataFrame:
    logs: dict[tuple[str, int], pd.Series] = {}
    for run in sorted(p for p in folder.iterdir() if (p / "loss.parquet").is_file()):
        match = NAME.fullmatch(run.name)
        if match:
            log = pd.read_parquet(run / "loss.parquet").set_index("step")["loss"]
            logs[match["init"], int(match["seed"])] = log
    seeds = sorted(
        {s for init, s in logs if init == "random"} & {s for init, s in logs if init == "symmetric"}
    )
    if not seeds:
        raise SystemExit(f"{folder}: no pair of random and symmetric runs with the same seed")
    reached = min(int(log.index.max()) for log in logs.values())
    frames = []
    for seed in seeds:
        gap = (logs["symmetric", seed] - logs["random", seed]).loc[:reached]
        frames.append(
            pd.DataFrame(
                {
                    "step": gap.index,
                    "seed": seed,
                    "gap": gap.values,
                    "gap_smoothed": gap.rolling(window).mean(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def summary(gaps: pd.DataFrame, every: int) -> pd.DataFrame:
    rows = []
    for step, group in gaps[gaps["step"] % every == 0].dropna().groupby("step"):
        values = group["gap_smoothed"]
        half = t_975(len(values) - 1) * values.std(ddof=1) / len(values) ** 0.5
        rows.append(
            {
                "step": step,
                "seeds": len(values),
                "mean": values.mean(),
                "lo": values.mean() - half,
                "hi": values.mean() + half,
            }
        )
    return pd.DataFrame(rows)


def figure(gaps: pd.DataFrame, table: pd.DataFrame, stem: Path) -> None:
    """The gap over training: mean over seed pairs with its 95% t-interval, each seed a thin line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    for seed, rows in gaps.groupby("seed"):
        label = "each seed pair" if seed == gaps["seed"].min() else None
        ax.plot(rows["step"], rows["gap_smoothed"], lw=0.6, color="0.6", label=label)
    ax.fill_between(table["step"], table["lo"], table["hi"], alpha=0.3, label="95% t-interval over seeds")
    ax.plot(table["step"], table["mean"], lw=1.8, label="mean over seed pairs")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xlabel("training step (update)")
    ax.set_ylabel("loss gap, symmetric − random")
    ax.legend(fontsize="small", loc="lower left")
    for suffix in (".pdf", ".png"):
        fig.savefig(stem.with_suffix(suffix), dpi=200)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folder", type=Path)
    parser.add_argument("--window", type=int, default=100, help="steps in the smoothing window")
    parser.add_argument("--every", type=int, default=100, help="steps between summary rows")
    args = parser.parse_args()
    gaps = loss_gap(args.folder, args.window)
    gaps.to_csv(args.folder / "loss_gap.csv", index=False, float_format="%.5g")
    table = summary(gaps, args.every)
    table.to_csv(args.folder / "loss_gap_summary.csv", index=False, float_format="%.5g")
    figure(gaps, table, args.folder / "loss_gap")
    print(table.iloc[:: max(1, len(table) // 16)].to_string(index=False))


if __name__ == "__main__":
    main()
