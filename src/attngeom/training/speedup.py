"""Table 1: final loss and the speed-up of symmetric over random initialisation.

The paper's definition: speed-up = (total steps − first step at which the symmetric run reaches the
random run's final loss) / total steps. Both losses are smoothed first (a trailing mean over 2% of the
run), so a single lucky batch cannot count as reaching the target.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

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


def dataset_label(dataset: str) -> str:
    """Short name of a dataset setting: a local file's stem, a Hub repo's last part, else the name."""
    if dataset.startswith("hf:"):
        return dataset[3:].split(":")[0].rsplit("/", 1)[-1]
    return Path(dataset).stem if "/" in dataset or Path(dataset).suffix else dataset


def run_info(run: Path) -> dict:
    """What a run folder trained (from its config.yaml)."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    return {
        "run": run.name,
        "dataset": dataset_label(config["dataset"]),
        "layers": config["n_layers"],
        "objective": config["objective"],
        "init": config["init"],
        "reg_weight": config["reg_weight"],
    }


def table1(runs: list[Path], paper: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per run: final smoothed loss; symmetric runs get the speed-up over their random twin
    (same dataset, depth, objective, no regulariser), and the paper's numbers where they exist."""
    info = pd.DataFrame([run_info(r) for r in runs]).assign(path=runs)
    info["final_loss"] = [float(smoothed(pd.read_parquet(p / "loss.parquet"))["loss"].iloc[-1]) for p in runs]
    info["speedup_percent"] = float("nan")
    key = ["dataset", "layers", "objective"]
    for _, group in info[info["reg_weight"] == 0].groupby(key):
        random = group[group["init"] == "random"]
        if random.empty:
            continue
        reference = pd.read_parquet(random["path"].iloc[0] / "loss.parquet")
        for index, row in group[group["init"] == "symmetric"].iterrows():
            info.loc[index, "speedup_percent"] = speedup(
                reference, pd.read_parquet(row["path"] / "loss.parquet")
            )
    info = info.drop(columns="path")
    if paper is not None:
        published = paper.rename(
            columns={"final_loss": "paper_loss", "speedup_percent": "paper_speedup_percent"}
        )
        encoders = info["objective"] == "encoder"  # Table 1 reports encoder-only models
        merged = info[encoders].merge(published, on=["layers", "dataset", "init"], how="left")
        info = pd.concat([merged, info[~encoders]], ignore_index=True)
    return info.sort_values(["dataset", "layers", "objective", "init", "run"]).reset_index(drop=True)
