"""What a pipeline user reads: every job's messages and the traceback that ends it in its rule's log (shown
by --show-failed-logs); training jobs log their progress (step, loss, tokens/s, ETA) at the log cadence; a
run started by other training code is trained afresh by the pipeline; a misspelt config key is one line
naming it and the nearest valid key."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pipeline_support import run_snakemake
from training_fixtures import tiny, write_corpus

from attngeom.cli import main
from attngeom.pipeline.config_keys import misspelt_key
from attngeom.provenance import code_hash
from attngeom.training.bookkeeping import progress_line
from attngeom.training.loop import train
from attngeom.training.runs import RunFolder

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))
TO_THE_LOG = {"to_rule_log(snakemake.log[0])"}
"""attngeom.pipeline.job_log's call: the job's output to its rule's log."""
LINE = re.compile(r"^step (\d+)/(\d+)  loss \d+\.\d{4}  [\d,]+ tokens/s  ETA \d+:\d\d:\d\d$")


def test_every_script_sends_its_output_to_its_rule_log_before_anything_else():
    """The first statement after the docstring and the import of attngeom.pipeline.job_log: so an import
    error, a warning or a traceback of the script lands in the log, not on the console of whoever started
    the run."""
    assert len(SCRIPTS) >= 12
    for script in SCRIPTS:
        body = ast.parse(script.read_text()).body
        body = body[1:] if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else body
        assert ast.unparse(body[0]) == "from attngeom.pipeline.job_log import to_rule_log", script.name
        assert ast.unparse(body[1]) in TO_THE_LOG, script.name


def test_every_rule_that_runs_a_script_has_a_log():
    """Each `rule` block of the workflow with a `script:` has a `log:` (a `use rule` inherits its parent's
    or names its own)."""
    checked = 0
    for rules in (ROOT / "workflow" / "rules").glob("*.smk"):
        blocks = re.split(r"^\s*(?:rule\s*\w*|use rule .*):\s*$", rules.read_text(), flags=re.M)[1:]
        for block in blocks:
            if re.search(r"^\s+script:", block, flags=re.M):
                checked += 1
                assert re.search(r"^\s+log:", block, flags=re.M), (
                    f"{rules.name}: a rule without log:\n{block}"
                )
    assert checked >= 12


@pytest.mark.slow  # about 15 s on 2 cores
def test_a_failing_script_s_traceback_is_in_its_log_and_shown_by_show_failed_logs(tmp_path):
    """Rule tables given an aggregate that is not Parquet (the upstream rules barred, so the damaged file is
    its input): the job fails, its log holds the traceback and the reader's error, and --show-failed-logs
    prints that log on the console."""
    model = {"id": "random/bert", "random": {"model_type": "bert"}, "objective": "bidirectional"}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"results": "results", "models": [model]}))
    aggregate = tmp_path / "results" / "aggregate"
    aggregate.mkdir(parents=True)
    (aggregate / "scores.parquet").write_text("not a Parquet file\n")
    pd.DataFrame({"model": ["random/bert"], "status": ["ok"]}).to_csv(aggregate / "models.csv", index=False)
    done = run_snakemake(
        "--configfile", "c.yaml", "--cores", "1", "--allowed-rules", "tables", "--show-failed-logs",
        "results/tables/summary.csv", cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode != 0
    log = (tmp_path / "results" / "logs" / "tables.log").read_text()
    assert log.startswith("Traceback (most recent call last):")
    # the reader's one line (record_files: a damaged record), which quotes pyarrow's own
    assert "scores.parquet: not a readable Parquet file (" in log and "Parquet magic bytes not found" in log
    assert "damaged or edited since it was written" in log
    shown = done.stdout + done.stderr
    assert "Logfile results/logs/tables.log:" in shown
    assert log.strip().splitlines()[-1] in shown.split("Logfile results/logs/tables.log:", 1)[1]


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
