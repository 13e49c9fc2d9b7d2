"""Training runs that a kill, a full disk or a second trainer cannot break (issue 43, points 2, 3, 9 and 11):
the same ``attngeom train --seeds`` command resumes after kills at random moments (real SIGKILL and
SIGTERM), a full disk while checkpointing is one line (``ulimit -f`` in a subprocess), what a killed writer
left half-written is removed when the run resumes, a run folder is locked while it trains, and no
masked-LM update is taken (or logged) without a masked token."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from training_fixtures import TINY, tiny, write_corpus

from attngeom.cli import main
from attngeom.errors import InputError
from attngeom.training.bookkeeping import read_loss_log
from attngeom.training.checkpoint import held_checkpoints
from attngeom.training.loop import train

HERE = Path(__file__).parent
LOGGED = ["step", "loss", "lm_loss", "grad_norm", "lr", "update_tokens", "tokens"]
"""The loss log's columns that depend on the arithmetic only (``elapsed_s`` is wall time)."""


def environment(**extra: str) -> dict[str, str]:
    source = os.pathsep.join(
        filter(None, [str(HERE.parent / "src"), str(HERE), os.environ.get("PYTHONPATH")])
    )
    return {**os.environ, "PYTHONPATH": source, "OMP_NUM_THREADS": "1", **extra}


def command_settings(tmp_path: Path, text_file: Path, **overrides) -> list[str]:
    settings = dict(TINY, dataset=text_file, cache_dir=tmp_path / "cache", batch_size=4, grad_accum=1)
    settings |= dict(device="cpu", **overrides)
    return [f"{key}={value}" for key, value in settings.items()]


# ---------------------------------------------------------------- point 2: stacked runs always resume


@pytest.mark.slow  # 20 kills and resumptions, forked from one process that imports once: about a minute
def test_the_same_stacked_command_resumes_after_20_kills_at_random_moments(tmp_path):
    write_corpus(tmp_path)
    done = subprocess.run(
        [sys.executable, str(HERE / "stacked_kills.py"), str(tmp_path), "20", "43"],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    whole, *killed, last = json.loads(done.stdout.strip().splitlines()[-1])
    assert whole == [0] and last[0] == 0, (whole, last)
    # each kill ended the command by its signal (or it had finished first): never by an error
    assert {code for code, *_ in killed} <= {0, -signal.SIGKILL, 128 + signal.SIGTERM}, killed
    assert {-signal.SIGKILL, 128 + signal.SIGTERM} <= {code for code, *_ in killed}
    # the kills fell where they matter: between the two runs' checkpoints, and mid-write (a temporary left)
    assert any(first and second and max(first) != max(second) for _, first, second, _ in killed), killed
    assert any(left for *_, left in killed), killed
    assert last[3] == [], "a resumed run removes what a killed writer left"
    for seed in (0, 1):
        a, b = tmp_path / f"whole-{seed}", tmp_path / f"killed-{seed}"
        losses = [pd.read_parquet(run / "loss.parquet")[LOGGED] for run in (a, b)]
        pd.testing.assert_frame_equal(losses[1], losses[0], check_exact=True)  # the same code path, resumed
        assert losses[0]["step"].tolist() == list(range(1, 61))
        weights = [load_file(run / "final" / "model.safetensors") for run in (a, b)]
        assert weights[0].keys() == weights[1].keys()
        assert all(weights[0][name].equal(weights[1][name]) for name in weights[0])


# ---------------------------------------------------------------- point 3: a full disk, a killed writer


@pytest.mark.slow  # the command in a subprocess (its imports take seconds), under its own file size limit
def test_a_file_size_limit_while_checkpointing_is_one_line_naming_the_checkpoint(tmp_path):
    """``ulimit -f 200`` (KiB): the logs fit, the 0.5 MB checkpoint does not; torch's 40-line RuntimeError
    from the writer thread becomes the OSError under it, named and saying what to do."""
    text_file = write_corpus(tmp_path)
    run = tmp_path / "run"
    settings = command_settings(tmp_path, text_file, steps=4, checkpoint_every=2)
    attngeom = shlex.join(
        [sys.executable, "-m", "attngeom.cli", "train", "--quiet", "--out", str(run), *settings]
    )
    done = subprocess.run(
        ["bash", "-c", f"ulimit -f 200; exec {attngeom}"],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"attngeom: error: {run / 'checkpoint' / 'state.pt'}: File too large"), lines
    assert "run the same command to resume" in lines[0]
    assert not [p.name for p in run.rglob("*") if ".tmp" in p.name]
    assert not (run / "final").exists()


def test_a_resumed_run_removes_what_a_killed_writer_left_and_nothing_else(tmp_path):
    text_file = write_corpus(tmp_path)
    config = tiny(tmp_path, text_file, steps=4, checkpoint_every=2, device="cpu")
    run = train(config, tmp_path / "run", progress=False, stop_at=2)
    left = [run / "checkpoint" / ".state.k3x_9q2a.tmp.pt", run / ".loss.ab12cd34.tmp.parquet"]
    left.append(run / ".final.zz9y8x7w.tmp")
    left[-1].mkdir()
    mine = [run / "checkpoint" / "notes.tmp.pt", run / ".state.keep", run / "my.tmp.parquet"]
    for path in left[:2] + mine:
        path.write_bytes(b"half a file")
    train(config, run, progress=False)
    assert not [path for path in left if path.exists()]
    assert all(path.read_bytes() == b"half a file" for path in mine)
    assert (run / "final").is_dir()


# ---------------------------------------------------------------- point 9: a run folder is locked


@pytest.mark.slow  # a trainer in a subprocess (its imports take seconds), a second one here
def test_a_folder_being_trained_is_locked_against_a_second_trainer_and_a_restart(tmp_path, capsys):
    text_file = write_corpus(tmp_path)
    run = tmp_path / "run"
    settings = command_settings(tmp_path, text_file, steps=100_000, checkpoint_every=5, lr=1e-4)
    trainer = subprocess.Popen(
        [sys.executable, "-m", "attngeom.cli", "train", "--quiet", "--out", str(run), *settings],
        env=environment(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not held_checkpoints_or_none(run) and trainer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert trainer.poll() is None and held_checkpoints_or_none(run), "the trainer did not get going"
        for extra, changed in (["--restart-if-changed"], ["lr=0.001"]), (["--restart"], []), ([], []):
            code = main(["train", "--quiet", "--out", str(run), *extra, *settings, *changed])
            lines = capsys.readouterr().err.strip().splitlines()
            assert code == 2 and len(lines) == 1, lines
            assert "is being trained by another process" in lines[0] and str(run) in lines[0], lines
        assert trainer.poll() is None, "the running trainer was disturbed"
        assert not list(tmp_path.glob("run.replaced-*"))
    finally:
        trainer.send_signal(signal.SIGTERM)
        trainer.wait(60)
    assert trainer.returncode == 128 + signal.SIGTERM, trainer.stderr.read()
    # the lock died with the trainer: the restart now goes ahead
    shorter = command_settings(tmp_path, text_file, steps=2, checkpoint_every=5, lr=1e-4)
    code = main(["train", "--quiet", "--out", str(run), "--restart-if-changed", *shorter])
    assert code == 0 and len(list(tmp_path.glob("run.replaced-*"))) == 1


def held_checkpoints_or_none(run: Path) -> dict[int, Path] | None:
    try:
        return held_checkpoints(run / "checkpoint" / "state.pt")
    except Exception:  # noqa: BLE001 (a checkpoint being renamed into place while it is looked at)
        return None


# ---------------------------------------------------------------- point 11: no update without a loss


@pytest.mark.parametrize(
    "batching",
    [
        dict(grad_accum=2),  # the token stream: each micro-batch its own group of loss positions
        dict(batch_documents=4, batch_size=2),  # documents, one group per update
        dict(batch_documents=4, batch_size=2, grad_accum=2, loss_average="micro_batch"),  # a group each
    ],
    ids=["stream", "documents", "documents, micro-batch means"],
)
def test_a_masked_lm_draw_that_picks_no_token_picks_one_and_logs_a_real_loss(tmp_path, batching):
    """At ``mlm_probability`` 1e-12 no draw picks a token: each group of loss positions then gets the one
    of lowest noise, so every logged loss is a cross-entropy (about ln 300 here), never 0.000."""
    text_file = write_corpus(tmp_path)
    settings = dict(steps=3, masking="bernoulli", mlm_probability=1e-12, checkpoint_every=3, device="cpu")
    config = tiny(tmp_path, text_file, **(settings | batching))
    run = train(config, tmp_path / "run", progress=False)
    log = read_loss_log(run / "loss.parquet")
    assert log["lm_loss"].between(3.0, 9.0).all(), log["lm_loss"].tolist()


class Pickled:
    """Not a tensor: torch's weights-only loader refuses a checkpoint holding it."""


def test_a_checkpoint_holding_objects_is_refused_without_advice_to_load_it_unsafely(tmp_path):
    text_file = write_corpus(tmp_path)
    config = tiny(tmp_path, text_file, steps=4, checkpoint_every=2, device="cpu")
    run = train(config, tmp_path / "run", progress=False, stop_at=2)
    torch.save({"model": Pickled(), "step": 2}, run / "checkpoint" / "state.pt")
    with pytest.raises(InputError) as refused:
        train(config, run, progress=False)
    text = str(refused.value)
    assert "Pickled, not only tensors" in text and "--restart" in text, text
    assert "weights_only" not in text and "False" not in text and "\n" not in text, text
