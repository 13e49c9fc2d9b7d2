"""Table 1: final loss and the speed-up of symmetric over random initialisation.

The paper's definition: speed-up = (total steps − first step at which the symmetric run reaches the
random run's final loss) / total steps. Both losses are smoothed first (a trailing mean over 2% of the
run), so a single lucky batch cannot count as reaching the target.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .runs import RunInfo, dataset_label, twins

__all__ = ["SMOOTHING_FRACTION", "dataset_label", "smoothed", "speedup", "table1"]
"""``dataset_label`` lives in ``runs``; the pipeline still imports it from here."""

SMOOTHING_FRACTION = 0.02


def smoothed(loss: pd.DataFrame, window: int | None = None) -> pd.DataFrame:
    """The loss log sorted by step, ``loss`` replaced by its trailing mean over ``window`` steps."""
    frame = loss.sort_values("step").reset_index(drop=True)
    window = window or max(1, round(SMOOTHING_FRACTION * len(frame)))
    return frame.assign(loss=frame["loss"].rolling(window, min_periods=1).mean())


def speedup(random: pd.DataFrame, symmetric: pd.DataFrame, window: int | None = None) -> float:
    """Speed-up in percent (0 when the symmetric run never reaches the random run's final loss)."""
    target = smoothed(random, window)["loss"].iloc[-1]
    sym = smoothed(symmetric, window)
    total = int(random["step"].max())
    reached = sym.loc[sym["loss"] <= target, "step"]
    if reached.empty:
        return 0.0
    return 100.0 * max(0, total - int(reached.iloc[0])) / total


def table1(runs: list[Path], paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per run: final smoothed loss; a symmetric run gets the speed-up over its random twin
    (``runs.twins``), and the paper's numbers where they exist."""
    infos = [RunInfo.read(run) for run in runs]
    losses = {info.name: pd.read_parquet(run / "loss.parquet") for info, run in zip(infos, runs, strict=True)}
    info = pd.DataFrame([i.labels() for i in infos])
    info["final_loss"] = [float(smoothed(losses[name])["loss"].iloc[-1]) for name in info["run"]]
    info["random_twin"] = None
    info["speedup_percent"] = float("nan")
    for twin in twins({i.name: i.config for i in infos}):
        row = info["run"] == twin.symmetric
        info.loc[row, "random_twin"] = twin.random
        info.loc[row, "speedup_percent"] = speedup(losses[twin.random], losses[twin.symmetric])
    if paper is not None:
        published = paper.rename(
            columns={"final_loss": "paper_loss", "speedup_percent": "paper_speedup_percent"}
        )
        encoders = info["objective"] == "encoder"  # Table 1 reports encoder-only models
        merged = info[encoders].merge(published, on=["layers", "dataset", "init"], how="left")
        info = pd.concat([merged, info[~encoders]], ignore_index=True)
    return info.sort_values(["dataset", "layers", "objective", "init", "run"]).reset_index(drop=True)
