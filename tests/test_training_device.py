"""`attngeom train` with device=auto on a machine without a GPU says so when a step is large (the README's
first example: minutes a step on a CPU), instead of training silently for days."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from training_fixtures import TINY, write_corpus

from attngeom.training.config import make_config
from attngeom.training.loop import train

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="device=auto picks the GPU here")
README_RUN = "steps=2000 n_layers=4 objective=encoder init=symmetric".split()
"""The README's first training command's settings (its dataset replaced by a small corpus)."""


def test_the_readmes_first_training_command_warns_before_its_first_step(tmp_path):
    corpus = write_corpus(tmp_path, 1500)  # more than one batch of 32 × 512 tokens
    command = [
        sys.executable,
        "-m",
        "attngeom.cli",
        "train",
        "--out",
        "run",
        *README_RUN,
        f"dataset={corpus}",
    ]
    env = dict(os.environ, ATTNGEOM_CACHE=str(tmp_path / "cache"))
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    try:
        for line in process.stderr:  # the warning comes before the first step: stop there
            if "warning" in line:
                break
    finally:
        process.kill()
        process.wait()
    assert "no CUDA device" in line and "TFLOP a step" in line and "device=cpu" in line, line


def test_no_warning_for_a_small_step(tmp_path, capsys):
    corpus = write_corpus(tmp_path, 50)
    settings = dict(TINY, dataset=str(corpus), cache_dir=str(tmp_path / "cache"), batch_size=1, grad_accum=1)
    train(
        make_config(settings, {"steps": 1, "score_every": 1, "log_every": 1}),
        tmp_path / "run",
        progress=False,
    )
    assert "warning" not in capsys.readouterr().err
