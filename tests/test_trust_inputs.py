"""Inputs a careless user gives (issue 32, points 8 to 11): two spellings of one seed, an output folder that is
a model's, a refs file of other bytes, a config.json nested past any parser, a display name with a newline,
and what `train --quiet` and a legacy checkpoint print."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from conformance import build, tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file
from test_sources_reliability import LLAMA  # the tiny Llama the source tests share
from training_fixtures import TINY, sentences

from attngeom.cli import main
from attngeom.errors import InputError
from attngeom.pipeline.registry import build_registry
from attngeom.tables.formats import to_markdown
from attngeom.training.cli import distinct_values
from attngeom.training.config import ConfigError

# ---------------------------------------------------------------- point 8: seeds compared as values


def spellings(seed: int) -> st.SearchStrategy[str]:
    """Ways to write the integer ``seed`` that ``make_config`` reads as it."""
    ways = [str(seed), f"{seed}.0", f"+{seed}", f" {seed} ", f"{seed}e0"]
    zeros = len(str(seed)) - len(str(seed).rstrip("0"))
    if zeros and seed:
        ways.append(f"{str(seed).rstrip('0')}e{zeros}")
    return st.sampled_from(ways)


SEEDS = st.lists(st.integers(0, 2**63 - 1) | st.sampled_from([0, 7, 1000, 2**53 + 1]), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), seeds=SEEDS)
def test_seeds_are_compared_as_values_not_spellings(data, seeds):
    written = [data.draw(spellings(seed)) for seed in seeds]
    try:
        values = distinct_values(",".join(written), "seed", [dict(TINY)])
    except ConfigError as err:
        assert len(set(seeds)) < len(seeds), str(err)
        assert "\n" not in str(err) and "give each seed once" in str(err)
        return
    assert values == seeds and len(set(seeds)) == len(seeds)


def test_two_spellings_of_one_seed_train_nothing(tmp_path, capsys):
    settings = [f"{k}={v}" for k, v in TINY.items()] + ["steps=1", f"cache_dir={tmp_path / 'cache'}"]
    code = main(["train", "--quiet", "--out", str(tmp_path / "r-{seed}"), "--seeds", "1e3,1000", *settings])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "1e3 and 1000 are the same seed (1000)" in err[0]
    assert not list(tmp_path.glob("r-*"))


# ---------------------------------------------------------------- point 9: no output in any model's folder


@pytest.fixture(scope="module")
def two_models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("models")
    for name in ("m2", "l2"):
        build(tiny_config("llama", **LLAMA)).save_pretrained(root / name)
    return root


@pytest.mark.parametrize("output", ["m2", "m2/", "m2/sub", "l2", "./l2/../m2"])
def test_several_models_into_a_models_folder_write_nothing(two_models, tmp_path, capsys, monkeypatch, output):
    models = tmp_path / "models"
    shutil.copytree(two_models, models)
    before = sorted(p.relative_to(models) for p in models.rglob("*"))
    monkeypatch.chdir(models)
    code = main(["score", "m2", "l2", "-o", output, "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "choose another -o" in err[0], err
    assert sorted(p.relative_to(models) for p in models.rglob("*")) == before


# ---------------------------------------------------------------- point 10: a config nested past any parser


@pytest.mark.parametrize(
    ("where", "depth"),
    [(where, depth) for where in ("config list", "config object") for depth in (100, 5_000, 50_000)]
    + [("index", 50_000)],
)
def test_json_nested_past_any_config_is_one_line(two_models, tmp_path, capsys, depth, where):
    model = tmp_path / "m"
    shutil.copytree(two_models / "m2", model)
    nested = "[" * depth + "]" * depth if where != "config object" else '{"a": ' * depth + "1" + "}" * depth
    if where == "index":
        (model / "model.safetensors.index.json").write_text('{"weight_map": {}, "x": ' + nested + "}")
    else:
        config = json.loads((model / "config.json").read_text())
        text = json.dumps(config)[:-1] + ', "deep": ' + nested + "}"
        (model / "config.json").write_text(text)
    code = main(["score", str(model), "-o", str(tmp_path / "s.parquet"), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("attngeom: error: "), err[-3:]
    assert ("index" if where == "index" else "config.json") in err[0]


# ---------------------------------------------------------------- point 11: small things


@settings(max_examples=200, deadline=None)
@given(label=st.text(min_size=1, max_size=12))
def test_a_display_name_is_one_printable_line_or_one_error(label):
    entry = {"id": "org/model", "objective": "encoder", "display": label}
    try:
        (model,) = build_registry([entry], "results").values()
    except InputError as err:
        assert "\n" not in str(err) and "one-line label" in str(err) and not label.isprintable()
        return
    row = to_markdown(pd.DataFrame([{"model": model.display, "symmetry": 0.5}]), "Table S2").splitlines()
    assert len(row) == 5 and label.isprintable()  # title, blank line, header, rule, the model's one row


def test_train_quiet_prints_only_the_skipped_documents_line_and_once(tmp_path):
    corpus = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": text}) for text in sentences(120)] + ['{"text": null}']
    corpus.write_text("\n".join(lines) + "\n")
    settings = [f"{k}={v}" for k, v in TINY.items()] + ["steps=2", "batch_size=2", "grad_accum=1"]
    settings += [f"dataset={corpus}", f"cache_dir={tmp_path / 'cache'}"]
    done = subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "train", "--quiet", "--out", str(tmp_path / "run"), *settings],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS="1"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.splitlines() == [f"attngeom: dataset {corpus}: skipped 1 null or empty documents"]


@pytest.mark.parametrize("pickled", ["plain pickle", "module"])
def test_a_pickle_checkpoint_is_one_line_without_torchs_notes(two_models, tmp_path, pickled):
    model = tmp_path / "legacy"
    model.mkdir()
    shutil.copy(two_models / "m2" / "config.json", model)
    state = load_file(two_models / "m2" / "model.safetensors")
    if pickled == "plain pickle":
        (model / "pytorch_model.bin").write_bytes(pickle.dumps(state))
    else:
        torch.save(torch.nn.Linear(2, 2), model / "pytorch_model.bin", _use_new_zipfile_serialization=False)
    done = subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "score", str(model), "-o", str(tmp_path / "s.parquet"), "--quiet"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONWARNINGS="default"),
    )  # fmt: skip
    err = done.stderr.splitlines()
    assert done.returncode == 2 and len(err) == 1 and "weights-only PyTorch checkpoint" in err[0], err
    assert "\x1b" not in err[0] and "weights_only" not in err[0] and "False" not in err[0], (
        err
    )  # no unsafe advice
