"""The GPU reproduction's one command, run for real on the CPU with a tiny model: 8 runs (encoder and
decoder × random and symmetric × 2 seeds), then Table 1 with intervals and the null, Figures 3 and S5,
and a small archive of the logs, at most 8 flat files; and runs stopped at the deadline, resumably."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "benchmarks" / "repro_training.py"

pytestmark = pytest.mark.slow


def repro_module():
    sys.path.insert(0, str(SCRIPT.parent))  # the script imports its sibling bench_training
    spec = importlib.util.spec_from_file_location("repro_training", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["repro_training"] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("repro-cache")


def test_one_command_trains_every_run_and_writes_table_1_figures_and_an_archive(cache, tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--seeds", "2", "--steps", "12"]
    command += ["--per-gpu", "4", "--cache", str(cache), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(
        [
            *(f"claims.{ext}" for ext in ("csv", "html", "md", "tex")),
            "figure_3_evolution.png",
            "figure_s5_decoder_causal.png",  # one Figure S5 per decoder loss
            "figure_s5_encoder.png",
            "figure_horizon_2L.png",  # every init against random, cut at each horizon
            "horizon.csv",
            "horizon_summary.csv",  # its mean over seeds at each horizon, with intervals and tests
            "notes.md",
            "runs.tar.gz",
            "table_1.csv",
            "table_1.html",
            "table_1.md",
            "table_1.tex",
        ]
    )
    assert all(p.is_file() and p.stat().st_size < 16 * 2**20 for p in out.iterdir())
    table = pd.read_csv(out / "table_1.csv")
    assert len(table) == 4 and set(table["seeds"]) == {2}
    symmetric = table[table["init"] == "symmetric"]
    assert (symmetric["seed_pairs"] == 2).all() and (symmetric["null_pairs"] == 1).all()  # disjoint pairs
    assert (
        symmetric[["speedup_robust_low", "signed_low", "signed_p_t", "signed_p_sign_flip"]]
        .notna()
        .all()
        .all()
    )
    spread = symmetric["signed_high"] > symmetric["signed_low"]  # 12 tiny steps may leave every pair at 0
    assert (symmetric["mde"].notna() == spread).all()  # the MDE follows from the seeds' spread, if any
    assert symmetric["verdict"].str.len().gt(0).all()
    claims = pd.read_csv(out / "claims.csv")
    assert claims["claim"].str.contains("symmetric init speeds up training").any()
    assert claims["verdict"].str.len().gt(0).all()
    notes = (out / "notes.md").read_text()
    assert notes.count("| finished |") == 8 and "null: random vs random" in notes
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = set(tar.getnames())
    runs = {f"{o}-{i}-s{s}" for o in ("encoder", "decoder") for i in ("random", "symmetric") for s in (0, 1)}
    assert {f"runs/{r}/{f}" for r in runs for f in ("config.yaml", "loss.parquet", "scores.parquet")} <= names
    assert {"figures/figure_3_evolution.pdf", "figures/official_comparison.pdf"} <= names

    again = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert again.returncode == 0 and again.stdout.count("finished (earlier call)") == 8


def test_runs_still_going_at_the_deadline_are_stopped_resumably(cache, tmp_path):
    repro = repro_module()
    args = repro.argparse.Namespace(
        tiny=True,
        seeds=1,
        steps=100_000,
        lr=1e-3,
        warmup=300,
        compile=False,
        device="cpu",
        cache=cache,
        inits=["random"],
    )
    runs = repro.plan(args, tmp_path / "runs")[:1]
    repro.prepare(cache, runs[0].settings)
    repro.launch(runs, gpus=0, per_gpu=1, deadline=time.monotonic() + 15, threads=1)
    (run,) = runs
    assert run.process.returncode == 128 + signal.SIGTERM  # attngeom's own SIGTERM exit (interrupts)
    assert run.status.startswith("stopped at the deadline after step") and "resumes" in run.status
    assert not (run.folder / "final").exists()
