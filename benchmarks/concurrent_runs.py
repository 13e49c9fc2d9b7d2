"""Several training runs sharing one GPU, in the paper's setting: the aggregate tokens/s and what it means
for the paper's 4-layer Table 1 row (200,000 updates × 256 documents, 2 inits × 3 seeds) on a 4-GPU host.

Each run is its own ``attngeom train`` process (seeds differ, as a row's runs do), all started together on
the same GPU; each run's rate is read off its own loss log between two logged updates after warm-up, and
the rates add up because the runs overlap for the whole window. Called by
``bench_training.py concurrent``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from bench_training import bench_config, paper_settings, table1_row_minutes

WARMUP = 100


def launch(preset: int, seed: int, stop: int, cache: Path, folder: Path) -> subprocess.Popen:
    config = bench_config(cache, preset, 32, **paper_settings("documents", stop), seed=seed)
    settings = [f"{k}={v}" for k, v in config.to_dict().items() if v is not None]
    command = [sys.executable, "-m", "attngeom.cli", "train", "--quiet", "--out", str(folder), "--stop-at"]
    log = (folder.parent / f"{folder.name}.log").open("w")
    return subprocess.Popen(
        [*command, str(stop), *settings], stdout=log, stderr=subprocess.STDOUT, env=os.environ
    )


def rate(folder: Path, stop: int) -> tuple[float, float]:
    """(tokens/s, updates/s) of one run between updates ``WARMUP`` and ``stop``."""
    log = pd.read_parquet(folder / "loss.parquet").set_index("step")
    seconds = float(log.loc[stop, "elapsed_s"] - log.loc[WARMUP, "elapsed_s"])
    return float(log.loc[WARMUP + 1 : stop, "update_tokens"].sum()) / seconds, (stop - WARMUP) / seconds


def concurrent_table(presets: list[int], runs: list[int], steps: int, cache: Path, out: Path) -> pd.DataFrame:
    rows = []
    for preset in presets:
        for n in runs:
            work = cache / f"concurrent-{preset}L-{n}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            stop = WARMUP + steps
            began = time.perf_counter()
            procs = [launch(preset, seed, stop, cache, work / f"seed{seed}") for seed in range(n)]
            codes = [p.wait() for p in procs]
            if any(codes):
                tail = (work / "seed0.log").read_text()[-800:]
                rows.append({"preset": preset, "runs_per_gpu": n, "error": f"exit {codes}: {tail}"})
                continue
            rates = [rate(work / f"seed{seed}", stop) for seed in range(n)]
            tokens = sum(r[0] for r in rates)
            updates = sum(r[1] for r in rates)
            rows.append(
                {
                    "preset": preset,
                    "runs_per_gpu": n,
                    "tokens_per_s_per_gpu": tokens,
                    "tokens_per_s_per_run": tokens / n,
                    "updates_per_s_per_gpu": updates,
                    "table1_row_min_4gpu": table1_row_minutes(n, updates / n),
                    "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY")),
                    "wall_s": time.perf_counter() - began,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(rows, indent=1))
    return pd.DataFrame(rows)
