"""Seeded check that training runs stacked (``attngeom train --seeds …``: one process, weights stacked, one
compiled step) leaves their loss curves where training each alone puts them: BERT-mini in the paper's
setting (256 documents an update), seeds 0 and 1 (random and symmetric init) trained alone through
``train()`` and together through ``train_stacked()``, same documents in the same order. Dropout draws
differ between the two ways (each run's masks come from one shared generator when stacked), so the
yardstick is seed noise: the gap between seed 0 and seed 1 alone. Prints one JSON line per run and writes
them with the curves to --out.

    python benchmarks/stacked_check.py --steps 400 --out OUT.json    # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from bench_training import CACHE, bench_config, paper_settings

RUNS = ((0, "random"), (1, "symmetric"))


def curve(folder: Path) -> np.ndarray:
    return pd.read_parquet(folder / "loss.parquet")["loss"].to_numpy()


def smooth(values: np.ndarray, window: int = 50) -> np.ndarray:
    return np.convolve(values, np.ones(window) / window, mode="valid")


def main() -> None:
    from attngeom.training.loop import train
    from attngeom.training.stacked import train_stacked

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    settings = {**paper_settings("documents", args.steps), "log_every": 1, "steps": args.steps}
    settings.update(warmup_steps=min(200, args.steps // 4), lr=5e-4)
    configs = [bench_config(CACHE, 4, 56, **settings, seed=s, init=i) for s, i in RUNS]
    work = CACHE / "stacked-check"
    shutil.rmtree(work, ignore_errors=True)
    began = time.perf_counter()
    alone = [curve(train(c, work / f"alone-{c.seed}", progress=False)) for c in configs]
    stacked = [
        curve(f)
        for f in train_stacked(configs, [work / f"stacked-{c.seed}" for c in configs], progress=False)
    ]
    seed_gap = float(np.abs(smooth(alone[1]) - smooth(alone[0])).mean())
    results = []
    for (seed, init), solo, together in zip(RUNS, alone, stacked, strict=True):
        result = {
            "seed": seed,
            "init": init,
            "steps": args.steps,
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "final_loss_alone": float(solo[-50:].mean()),
            "final_loss_stacked": float(together[-50:].mean()),
            "mean_abs_gap_stacked_vs_alone": float(np.abs(smooth(together) - smooth(solo)).mean()),
            "mean_abs_gap_seed1_vs_seed0_alone": seed_gap,
            "first_loss_alone": float(solo[0]),
            "first_loss_stacked": float(together[0]),
        }
        print(json.dumps(result), flush=True)
        results.append({**result, "loss_alone": solo.tolist(), "loss_stacked": together.tolist()})
    results.append({"wall_s": time.perf_counter() - began, "settings": settings})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
