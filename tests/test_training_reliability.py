"""Training that can be trusted: same corpus → same ids, settings checked where they enter, a changed or
failed run never blocks or overwrites another, and the data under a resumed run is the data it began on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest
import torch
import yaml
from training_fixtures import TINY, sentences, tiny, write_corpus

from attngeom.cli import main
from attngeom.training.config import ConfigError, make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.loop import train
from attngeom.training.runs import RunFolder


@pytest.fixture
def text_file(tmp_path):
    return write_corpus(tmp_path)


TOKENIZE = """
import json, sys
from attngeom.training.config import make_config
from attngeom.training.documents import DocumentSource
from attngeom.training.tokenizer import build_tokenizer, tokenizer_sha256
config = make_config({"dataset": sys.argv[1], "vocab_size": 120})
tok = build_tokenizer(config, DocumentSource.of(config).texts)
print(json.dumps({"sha256": tokenizer_sha256(tok), "vocab": tok.get_vocab(),
                  "ids": tok.encode(open(sys.argv[1]).read()).ids}))
"""


def fresh_process_tokenizer(corpus) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", TOKENIZE, str(corpus)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_wordpiece_gives_the_same_ids_in_every_fresh_process(tmp_path):
    """The trainer's hash-map order differs per process; the ids must not."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(300) + ["Zebra-quartz, jolly fix: 42 vexing wombats."]) + "\n")
    first, second, third = (fresh_process_tokenizer(corpus) for _ in range(3))
    assert len(first["vocab"]) == 120
    assert first["vocab"] == second["vocab"] == third["vocab"]
    assert first["ids"] == second["ids"] == third["ids"]
    assert first["sha256"] == second["sha256"] == third["sha256"]


def test_run_folder_records_the_tokenizer_and_token_stream(tmp_path, text_file):
    run = train(tiny(tmp_path, text_file, steps=1), tmp_path / "run", progress=False)
    corpus = load_corpus(tiny(tmp_path, text_file), progress=False)
    recorded = json.loads((run / "corpus.json").read_text())
    hashes = {"tokenizer_sha256": corpus.tokenizer_sha256, "tokens_sha256": corpus.tokens_sha256}
    assert {k: recorded[k] for k in hashes} == hashes
    assert set(recorded) - set(hashes) == {
        "documents",
        "tokens_per_update",
        "passes_per_update",
    }  # the data's size


def test_resume_after_the_token_cache_is_rebuilt_continues_exactly(tmp_path, text_file):
    config = tiny(tmp_path, text_file, steps=6, log_every=1, checkpoint_every=3)
    whole = train(config, tmp_path / "whole", progress=False)
    train(config, tmp_path / "cut", progress=False, stop_at=3)
    cache = load_corpus(config, progress=False).path
    for path in cache.iterdir():
        path.unlink()
    cache.rmdir()  # deleted: the resume rebuilds it
    cut = train(config, tmp_path / "cut", progress=False)
    pd.testing.assert_frame_equal(
        *(pd.read_parquet(p / "loss.parquet")[["step", "loss"]] for p in (whole, cut))
    )


def test_resume_with_a_different_tokenizer_is_refused(tmp_path, text_file, capsys):
    config = tiny(tmp_path, text_file, steps=4)
    run = train(config, tmp_path / "run", progress=False, stop_at=2)
    tokenizer = load_corpus(config, progress=False).path / "tokenizer.json"
    data = json.loads(tokenizer.read_text())
    vocab = data["model"]["vocab"]
    a, b = sorted(vocab)[-2:]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # what a build with other ids leaves in the cache
    tokenizer.write_text(json.dumps(data))
    before = sorted(p.name for p in run.iterdir())
    args = [f"{k}={v}" for k, v in config.to_dict().items() if v is not None]
    assert main(["train", "--out", str(run), "--quiet", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "tokenizer_sha256" in err and "--restart" in err
    assert sorted(p.name for p in run.iterdir()) == before
    assert torch.load(run / "checkpoint" / "state.pt", weights_only=True)["step"] == 2


# ------------------------------------------------------------------ settings


@pytest.mark.parametrize(
    "setting",
    [
        "lr=-1",
        "lr=0",
        "lr=nan",
        "lr=inf",
        "dropout=2",
        "dropout=1",
        "dropout=-0.1",
        "weight_decay=-1",
        "grad_clip=-1",
        "grad_clip=inf",
        "warmup_steps=-1",
        "mlm_probability=0",
        "reg_weight=-1",
        "reg_weight=nan",
        "seq_len=4",
        "hidden_size=0",
        "vocab_size=0",
        "steps=10.5",
        "steps=0",
        "steps=1e400",
        "batch_size=-2",
        "seed=-1",
        "max_documents=0",
        "dataset=",
    ],
)
def test_cli_refuses_an_out_of_range_setting_in_one_line(tmp_path, capsys, setting):
    assert main(["train", "--out", str(tmp_path / "run"), setting]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attngeom: error: training setting") and err.count("\n") == 0
    assert setting.partition("=")[0] in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("yaml_text", "fragment"),
    [
        ("steps: 10.5\n", "steps=10.5"),
        ("steps: true\n", "steps=True"),
        ("lr: .nan\n", "lr=nan"),
        ("dropout: 2\n", "dropout=2"),
        ("training: [1, 2]\n", "training: must be a mapping"),
        ("steps: [\n", "cannot read training config"),
    ],
)
def test_config_file_values_are_checked_too(tmp_path, capsys, yaml_text, fragment):
    path = tmp_path / "train.yaml"
    path.write_text(yaml_text)
    assert main(["train", "--out", str(tmp_path / "run"), "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and err.count("\n") == 0


def test_integral_values_are_accepted_in_any_spelling():
    assert make_config({"steps": "1e3", "warmup_steps": 10.0, "lr": 1}).steps == 1000
    assert make_config({"warmup_steps": 10.0}).warmup_steps == 10
    with pytest.raises(ConfigError, match="not a valid int"):
        make_config({"steps": "1.05e1"})


def test_a_diverging_run_is_one_line(tmp_path, text_file, capsys):
    args = [f"{k}={v}" for k, v in TINY.items()]
    code = main(
        ["train", "--out", str(tmp_path / "run"), "--quiet", *args, f"dataset={text_file}",
         f"cache_dir={tmp_path / 'cache'}", "steps=4", "batch_size=2", "grad_accum=1", "lr=1e30",
         "warmup_steps=0", "grad_clip=0", "log_every=1"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "diverged" in err and err.count("\n") == 0


# ------------------------------------------------------------------ the Hub, offline


@pytest.mark.parametrize("dataset", ["jigsaw", "hf:someone/some-corpus"])
def test_hub_dataset_offline_is_one_line_naming_it(tmp_path, dataset):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    done = subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "train", "--out", str(tmp_path / "run"), "--quiet",
         f"dataset={dataset}", f"cache_dir={tmp_path / 'cache'}"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("attngeom: error:")
    assert dataset in err[0] and "HF_HUB_OFFLINE" in err[0]
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ changed and failed runs


def test_changed_settings_are_an_error_naming_restart_and_touch_nothing(tmp_path, text_file):
    run = train(tiny(tmp_path, text_file, steps=2), tmp_path / "run", progress=False)
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    with pytest.raises(ConfigError, match=r"other settings \(lr: 5e-05 → 0.001\).*--restart"):
        train(tiny(tmp_path, text_file, steps=2, lr=1e-3), run, progress=False)
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before


def test_if_changed_moves_the_old_run_aside_and_trains_afresh(tmp_path, text_file):
    old = tiny(tmp_path, text_file, steps=3, log_every=1)
    run = train(old, tmp_path / "run", progress=False)
    old_loss = pd.read_parquet(run / "loss.parquet")
    new = tiny(tmp_path, text_file, steps=2, lr=1e-3, log_every=1)
    train(new, run, progress=False, restart="if-changed")
    (aside,) = tmp_path.glob("run.replaced-*")
    # recorded as they ran: attention auto made concrete for the CPU
    assert RunFolder(aside).recorded_config() == replace(old, attention="dense")
    assert RunFolder(run).recorded_config() == replace(new, attention="dense")
    pd.testing.assert_frame_equal(pd.read_parquet(aside / "loss.parquet"), old_loss)
    assert list(pd.read_parquet(run / "loss.parquet")["step"]) == [1, 2]
    assert (aside / "final").is_dir() and (run / "final").is_dir()


def test_if_changed_resumes_a_run_with_the_same_settings(tmp_path, text_file):
    config = tiny(tmp_path, text_file, steps=4, log_every=1, checkpoint_every=2)
    train(config, tmp_path / "run", progress=False, stop_at=2)
    train(config, tmp_path / "run", progress=False, restart="if-changed")
    assert not list(tmp_path.glob("run.replaced-*"))
    assert list(pd.read_parquet(tmp_path / "run" / "loss.parquet")["step"]) == [1, 2, 3, 4]


@pytest.mark.parametrize("restart", ["never", "if-changed"])
def test_a_run_started_with_another_attention_kernel_resumes(tmp_path, text_file, restart):
    """A run started on a GPU (``attention: auto`` recorded as ``blocks``) resumes on a CPU (``dense``): the
    kernels compute the same attention. Its folder keeps the kernel it started with."""
    config = tiny(tmp_path, text_file, steps=4, log_every=1, checkpoint_every=2)
    run = train(config, tmp_path / "run", progress=False, stop_at=2)
    recorded = yaml.safe_load((run / "config.yaml").read_text())
    assert recorded["attention"] == "dense"
    (run / "config.yaml").write_text(yaml.safe_dump({**recorded, "attention": "blocks"}))
    train(config, run, progress=False, restart=restart)
    assert not list(tmp_path.glob("run.replaced-*"))
    assert list(pd.read_parquet(run / "loss.parquet")["step"]) == [1, 2, 3, 4]
    assert RunFolder(run).recorded_config().attention == "blocks"


def test_cli_restart_moves_even_an_identical_run_aside(tmp_path, text_file):
    config = tiny(tmp_path, text_file, steps=1)
    args = [f"{k}={v}" for k, v in config.to_dict().items() if v is not None]
    assert main(["train", "--out", str(tmp_path / "run"), "--quiet", *args]) == 0
    assert main(["train", "--out", str(tmp_path / "run"), "--quiet", "--restart", *args]) == 0
    assert main(["train", "--out", str(tmp_path / "run"), "--quiet", "--restart", *args]) == 0
    assert len(list(tmp_path.glob("run.replaced-*"))) == 2
    assert (tmp_path / "run" / "final").is_dir()


def test_a_run_that_fails_before_its_first_step_leaves_nothing_in_the_way(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    typo = [f"{k}={v}" for k, v in TINY.items()] + [f"cache_dir={tmp_path / 'cache'}", "steps=1"]
    assert main(["train", "--out", str(out), "--quiet", *typo, f"dataset={text_file}x"]) == 2
    assert "neither" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()  # as an earlier version left it: settings written, then the start failed
    (out / "config.yaml").write_text("dataset: typo\n")
    assert main(["train", "--out", str(out), "--quiet", *typo, f"dataset={text_file}", "batch_size=2"]) == 0
    assert (out / "final").is_dir() and not list(tmp_path.glob("run.replaced-*"))


def test_token_cache_defaults_to_the_package_cache_and_is_never_half_written(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNGEOM_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(sentences(50)) + "\n")
    settings = dict(TINY, dataset=str(corpus))
    assert load_corpus(make_config(settings), progress=False).path.parent == tmp_path / "cache" / "training"
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="no documents"):
        load_corpus(make_config(settings, {"dataset": str(empty)}), progress=False)
    folders = [p for p in (tmp_path / "cache" / "training").iterdir() if p.is_dir()]
    assert len(folders) == 1  # the first corpus only; nothing of the failed one


def test_an_edited_local_corpus_is_tokenised_again(tmp_path, text_file):
    config = tiny(tmp_path, text_file)
    first = load_corpus(config, progress=False)
    text_file.write_text("\n".join(sentences(300, seed=1)) + "\n")
    second = load_corpus(config, progress=False)
    assert second.path != first.path and second.tokens_sha256 != first.tokens_sha256


def test_a_run_without_a_data_record_is_not_resumed_on_todays_cache(tmp_path, text_file):
    config = tiny(tmp_path, text_file, steps=3)
    run = train(config, tmp_path / "run", progress=False, stop_at=1)
    (run / "corpus.json").unlink()  # as a run of an earlier version left it
    with pytest.raises(ConfigError, match="records no corpus.json.*--restart"):
        train(config, run, progress=False, restart="if-changed")
    train(config, run, progress=False, restart="always")
    assert (run / "final").is_dir() and len(list(tmp_path.glob("run.replaced-*"))) == 1


def test_out_naming_a_file_is_refused(tmp_path, text_file):
    (tmp_path / "run").write_text("not a folder")
    with pytest.raises(ConfigError, match="is a file"):
        train(tiny(tmp_path, text_file, steps=1), tmp_path / "run", progress=False)
