"""benchmarks/init_arms.py: the experiments' plan, and its CPU route (``--tiny``) long enough for Table 1's
authors' columns to fill."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attngeom.runstats import authors
from attngeom.runstats.table1 import table1
from attngeom.training.inits import AUTHORS

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "init_arms.py"
AUTHORS_LOGS = ROOT / "config" / "reference" / "authors-logs"


def test_the_horizon_runs_are_one_process_a_gpu():
    """Four runs of 150,000 updates on four GPUs: each alone on its GPU (stacked or shared, each would
    slow the others past a 30-minute hold)."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "plan", "--gpus", "4", "--experiments", "horizon", "--group-by", "run"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert len(out) == 4 and all(line.count("horizon-s") == 1 for line in out)
    assert {line.split(": ")[1] for line in out} == {
        f"horizon-s{seed}-{init}" for seed in (0, 1) for init in ("random", "torch_default_symmetric")
    }


@pytest.mark.slow
def test_the_tiny_route_fills_the_authors_columns(tmp_path, bench_cache):
    """`init_arms.py run --tiny` (4 layers, 400 updates on the CPU): the seed pair's Table 1 row has the
    authors' BERT-mini Jigsaw run beside it, at the row's horizon and at their 200,000 updates."""
    command = [
        sys.executable, str(SCRIPT), "run", "--device", "cpu", "--tiny", "--experiments", "horizon",
        "--group-by", "run", "--gpus", "1", "--cache", str(bench_cache), "--out", str(tmp_path / "runs"),
        "--only", "horizon-s0-random", "horizon-s0-torch_default_symmetric",
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    runs = sorted(p for p in (tmp_path / "runs").iterdir() if (p / "loss.parquet").exists())
    assert [p.name for p in runs] == ["horizon-random-s0", "horizon-torch_default_symmetric-s0"]
    row = table1(runs, authors_logs=authors.read_logs(AUTHORS_LOGS)).set_index("init").loc[AUTHORS]
    assert (row["layers"], row["steps"]) == (4, 400)
    assert row["authors_jigsaw_robust"] == pytest.approx(0.0)  # their pair at 400 updates: not yet apart
    assert row["authors_jigsaw_end_robust"] == pytest.approx(20.5, abs=0.05)
