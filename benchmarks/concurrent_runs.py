"""Several training runs sharing one GPU, in the paper's setting: the aggregate tokens/s and what it means
for the paper's 4-layer Table 1 row (200,000 updates × 256 documents, 2 inits × 3 seeds) on a 4-GPU host.

Each run is its own ``attngeom train --config config/paper.yaml`` process (``paper_setting``) (seeds differ, as a row's runs do), all started together on
the same GPU; each run's rate is read off its own loss log between two logged updates after warm-up, and
the rates add up because the runs overlap for the whole window. Called by
``bench_training.py concurrent``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
from paper_setting import WARMUP, corpus_settings, launch, rate, table1_row_minutes, train_command


def concurrent_table(presets: list[int], runs: list[int], steps: int, cache: Path, out: Path) -> pd.DataFrame:
    rows = []
    for preset in presets:
        for n in runs:
            work = cache / f"concurrent-{preset}L-{n}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            stop = WARMUP + steps
            began = time.perf_counter()
            settings = (*corpus_settings(cache), f"n_layers={preset}")
            procs = [
                launch(
                    train_command(work / f"seed{seed}", stop, *settings, f"seed={seed}"),
                    work / f"seed{seed}.log",
                )
                for seed in range(n)
            ]
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
