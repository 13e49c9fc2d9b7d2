"""DDP under torchrun on the CPU (gloo): two ranks train what one process accumulating two micro-batches
trains, because rank r of step s takes micro-batch 2s + r, the one the single process takes second; and
each rank's run ends in an order that lets it exit (its DDP wrapper freed before its process group)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from ddp_teardown import ALIVE

from attngeom.cli import main

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"
WORDS = "the a nation people congress state war peace law union free trade tax year work we our".split()


def tiny_run(tmp_path: Path, **settings: object) -> list[str]:
    """Settings of a tiny run on a small word corpus (written to ``tmp_path``), then ``settings``."""
    rng = random.Random(2)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(rng.choices(WORDS, k=rng.randint(2, 25))) for _ in range(300)))
    return [
        f"dataset={corpus}",
        f"cache_dir={tmp_path / 'cache'}",
        *"n_layers=2 hidden_size=32 n_heads=4 intermediate_size=64 vocab_size=300 seq_len=48".split(),
        *"batch_size=3 dropout=0 warmup_steps=1 lr=1e-3 log_every=1 device=cpu".split(),
        *(f"{key}={value}" for key, value in settings.items()),
    ]


def torchrun(*command: str) -> subprocess.CompletedProcess:
    """``command`` on two ranks (torchrun; gloo on the CPU), one thread each, as the train rule runs it."""
    env = dict(
        os.environ, PYTHONPATH=f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1"
    )
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    return subprocess.run([*launch, *command], env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_two_ranks_train_like_one_process_accumulating_two(tmp_path):
    settings = tiny_run(tmp_path, steps=4)
    done = torchrun(
        "-m", "attngeom.cli", "train", "--quiet", "--out", str(tmp_path / "two"), *settings, "grad_accum=1"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert main(["train", "--quiet", "--out", str(tmp_path / "one"), *settings, "grad_accum=2"]) == 0

    columns = ["step", "loss", "lm_loss", "grad_norm", "tokens"]
    two, one = (pd.read_parquet(tmp_path / run / "loss.parquet")[columns] for run in ("two", "one"))
    assert list(two["step"]) == [1, 2, 3, 4]
    pd.testing.assert_frame_equal(two, one, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "two" / "final" / "model.safetensors").is_file()


@pytest.mark.slow
def test_each_rank_frees_its_ddp_wrapper_before_it_leaves_the_process_group(tmp_path):
    """A wrapper freed after the gloo group is destroyed could leave a rank hanging after its last step
    (tests/ddp_teardown.py says how); each rank counts the wrappers alive at that moment."""
    out = tmp_path / "run"
    done = torchrun(
        str(TESTS / "ddp_teardown.py"), "train", "--quiet", "--out", str(out), *tiny_run(tmp_path, steps=2)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    counts = [line.rsplit(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith(ALIVE)]
    assert counts == ["0", "0"], done.stdout[-3000:]
    assert (out / "final" / "model.safetensors").is_file()
