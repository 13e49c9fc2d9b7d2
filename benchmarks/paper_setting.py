"""The paper's training setting as users get it: ``attngeom train --config config/paper.yaml`` (its
``training: defaults:`` as they are), on the offline corpus (``bench_training.py prepare``), timed from the
runs' own loss logs. Shared by ``bench_training.py`` and ``concurrent_runs.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from attngeom.training.config import read_config_file

ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIG = ROOT / "config" / "paper.yaml"
CACHE = ROOT / "benchmarks" / ".cache" / "training"
PAPER_UPDATES = 200_000
PAPER_ROW_RUNS = 6
"""Runs of one Table 1 row as the paper's grid had them: random and symmetric init × 3 seeds."""
HOST_GPUS = 4
WARMUP = 100
"""Updates before the timed window (compilation, CUDA graphs, the allocator's growth)."""


def paper_defaults() -> dict:
    """``config/paper.yaml``'s training defaults, as ``attngeom train --config`` reads them."""
    return read_config_file(PAPER_CONFIG)


def corpus_settings(cache: Path = CACHE) -> list[str]:
    """The offline corpus in place of the paper's: the State of the Union paragraphs, BERT's uncased
    vocabulary as a file (the GPU host has no packaged model), a token cache of its own."""
    return [
        f"dataset={cache / 'sotu_paragraphs.txt'}",
        f"tokenizer={cache / 'tokenizer.json'}",
        f"cache_dir={cache / 'tokens'}",
    ]


def train_command(
    out: Path, stop: int, *settings: str, seeds: str | None = None, inits: str | None = None
) -> list[str]:
    """``attngeom train`` on the paper's defaults plus ``settings``, stopped after update ``stop``;
    with ``seeds``/``inits``, those runs stacked in one process (``out`` then a template)."""
    stacked = [*(["--seeds", seeds] if seeds else []), *(["--inits", inits] if inits else [])]
    return [
        sys.executable, "-m", "attngeom", "train", "--config", str(PAPER_CONFIG), "--log-lines",
        *settings, *stacked, "--stop-at", str(stop), "--out", str(out),
    ]  # fmt: skip


def launch(command: list[str], log: Path) -> subprocess.Popen:
    """The command in the background, with this checkout's package first on its path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env)


def rate(folder: Path, stop: int, warmup: int = WARMUP) -> tuple[float, float]:
    """(tokens/s, updates/s) of one run between its logged updates ``warmup`` and ``stop``."""
    log = pd.read_parquet(folder / "loss.parquet").set_index("step")
    seconds = float(log.loc[stop, "elapsed_s"] - log.loc[warmup, "elapsed_s"])
    return float(log.loc[warmup + 1 : stop, "update_tokens"].sum()) / seconds, (stop - warmup) / seconds


def table1_row_minutes(runs_per_gpu: int, updates_per_s_per_run: float) -> float:
    """Minutes for the 4-layer Table 1 row (``PAPER_ROW_RUNS`` runs of ``PAPER_UPDATES`` updates) on a
    ``HOST_GPUS``-GPU host with ``runs_per_gpu`` runs on each GPU, in rounds."""
    rounds = -(-PAPER_ROW_RUNS // (HOST_GPUS * runs_per_gpu))
    return rounds * PAPER_UPDATES / updates_per_s_per_run / 60
