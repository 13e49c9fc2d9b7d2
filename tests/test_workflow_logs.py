"""What a pipeline user reads: training jobs log their progress (step, loss, tokens/s, ETA) at the log
cadence; a run started by other training code is trained afresh by the pipeline; a misspelt config key is
one line naming it and the nearest valid key."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from training_fixtures import tiny, write_corpus

from attngeom.cli import main
from attngeom.pipeline.config_keys import misspelt_key
from attngeom.provenance import code_hash
from attngeom.training.bookkeeping import progress_line
from attngeom.training.loop import train
from attngeom.training.runs import RunFolder

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
LINE = re.compile(r"^step (\d+)/(\d+)  loss \d+\.\d{4}  [\d,]+ tokens/s  ETA \d+:\d\d:\d\d$")


def test_a_progress_line_says_step_loss_throughput_and_time_left():
    assert (
        progress_line(30, 300, 6.25, 12345.6, 0.5) == "step 30/300  loss 6.2500  12,346 tokens/s  ETA 0:02:15"
    )
    assert progress_line(10, 4000, 1.0, 10.0, 1.0).endswith("ETA 1:06:30")


def test_training_logs_a_progress_line_per_log_interval(tmp_path, capsys):
    corpus = write_corpus(tmp_path)
    config = tiny(tmp_path, corpus, steps=6, log_every=2, grad_accum=1)
    train(config, tmp_path / "run", progress="lines")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [LINE.match(line).groups() for line in lines] == [("2", "6"), ("4", "6"), ("6", "6")]
    # the pipeline's command for a run on several GPUs: the same lines, from the CLI
    settings = [f"{k}={v}" for k, v in config.to_dict().items() if v is not None]
    assert main(["train", "--out", str(tmp_path / "cli"), "--log-lines", *settings]) == 0
    assert sum(bool(LINE.match(line)) for line in capsys.readouterr().out.splitlines()) == 3


def test_a_run_of_other_training_code_is_trained_afresh_if_changed_and_resumed_otherwise(tmp_path):
    corpus = write_corpus(tmp_path)
    config = tiny(tmp_path, corpus, steps=2, grad_accum=1)
    run = train(config, tmp_path / "run", progress=False)
    folder = RunFolder(run)
    assert folder.recorded_code() == code_hash("training")
    folder.code.write_text(json.dumps({"code_hash": "older"}))  # as if an earlier attngeom started it
    train(config, run, progress=False)  # the CLI's default: resume, whatever the code
    assert not list(tmp_path.glob("run.replaced-*"))
    train(config, run, progress=False, restart="if-changed")  # the pipeline's: train afresh
    assert len(list(tmp_path.glob("run.replaced-*"))) == 1
    assert folder.recorded_code() == code_hash("training")


def config_with(change) -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    change(config)
    return config


@pytest.mark.parametrize(
    "change,expected",
    [
        (lambda c: c.update(result="out"), "config: unknown key 'result' (did you mean 'results'?)"),
        (
            lambda c: c["scoring"].update(dtyp="float32"),
            "config: scoring: unknown key 'dtyp' (did you mean 'dtype'?)",
        ),
        (
            lambda c: c["models"][2].update(famly="BERT"),
            "config: models[2] (random/bert): unknown key 'famly' (did you mean 'family'?)",
        ),
        (
            lambda c: c["training"]["defaults"].update(stepz=3),
            "config: training.defaults: unknown key 'stepz' (did you mean 'steps'?)",
        ),
        (
            lambda c: c["training"]["runs"][0].update(int="symmetric"),
            "config: training.runs[0]: unknown key 'int' (did you mean 'init'?)",
        ),
        (
            lambda c: c["figures"]["heatmap"].update(encodr={"model": "x"}),
            "config: figures.heatmap: unknown key 'encodr' (did you mean 'encoder'?)",
        ),
    ],
)
def test_a_misspelt_key_is_named_with_the_nearest_valid_one(change, expected):
    assert misspelt_key(config_with(change), SCHEMA).startswith(expected)


def test_every_shipped_config_has_only_known_keys():
    for path in [*(ROOT / "config").glob("*.yaml"), ROOT / ".test" / "config" / "config.yaml"]:
        assert misspelt_key(yaml.safe_load(path.read_text()), SCHEMA) is None, path


def test_the_workflow_stops_on_a_misspelt_key_in_one_line(tmp_path):
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config_with(lambda c: c["scoring"].update(dtyp="x"))))
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "workflow" / "Snakefile")]
    done = subprocess.run(
        [*command, "-n", "--configfile", "c.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    ours = [
        line for line in (done.stdout + done.stderr).splitlines() if "workflow specific profile" not in line
    ]
    assert done.returncode == 2
    assert ours == [
        "attngeom: error: config: scoring: unknown key 'dtyp' (did you mean 'dtype'?); config/README.md "
        "explains every key"
    ]
