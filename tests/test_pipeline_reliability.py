"""The pipeline under bad input: a config mistake is refused when the DAG is built, with the name to fix;
a model that cannot be scored, for any reason, is recorded and the tables are still made; results hold
no path of this machine and are readable by colleagues; the configured id is the id in every result."""

from __future__ import annotations

import inspect
import json
import os
import stat
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from pipeline_support import BROKEN_MODELS, ROOT, TINY_MODELS, planned_jobs, run_snakemake, write_config
from transformers import BertConfig, BertModel

from attngeom import engine
from attngeom.cli import main
from attngeom.errors import InputError
from attngeom.files import atomic_dir, slug
from attngeom.pipeline import random_models, registry, training_runs
from attngeom.pipeline.outcome import ScoreJob, portable, score_and_record

SCHEMAS = ROOT / "workflow" / "schemas"
SETTINGS = {"steps": 3, "n_layers": 2, "hidden_size": 8, "n_heads": 2, "intermediate_size": 8}
RUN = {"name": "r", **SETTINGS}


# ---------------------------------------------------------------- config refused when the DAG is built


def dry_run_of(tmp_path: Path, change) -> str:
    """A dry-run of the tiny config after ``change(config)``; its output (the run must fail)."""
    config = yaml.safe_load(write_config(tmp_path / "c.yaml", TINY_MODELS[:1]).read_text())
    change(config)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake("all", "-n", "--configfile", "c.yaml", cwd=tmp_path, check=False)
    assert result.returncode != 0, result.stdout[-2000:]
    return result.stdout + result.stderr


def _set(path: str, value):
    def change(config: dict) -> None:
        *parents, last = path.split(".")
        node = config
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        node[last] = value

    return change


@pytest.mark.parametrize(
    "change,expected",
    [
        (_set("result", "out"), "unknown key 'result' (did you mean 'results'?)"),
        (_set("models", []), "should be non-empty"),
        (_set("models.0.random.num_hidden_layer", 2), "did you mean num_hidden_layers"),
        (_set("models.0.random.hidden_size", "wide"), "hidden_size"),
        (_set("figures.heatmap.decoder", {"model": "not/listed"}), "'not/listed' is not in models"),
        (_set("training", {"runs": [{**RUN, "name": ".."}]}), "'..' must be letters"),
        (_set("training", {"runs": [{**RUN, "steps": 10.5}]}), "10.5 is not of type 'integer'"),
        (
            _set("training", {"runs": [RUN], "defaults": {"stepz": 3}}),
            "unknown key 'stepz' (did you mean 'steps'?)",
        ),
        (_set("training", {"runs": [RUN], "grid": {"steps": [2, 10.5]}}), "steps=10.5 is not a valid int"),
        (_set("training", {"runs": [RUN], "grid": {"lrr": [0.1]}}), "unknown training setting 'lrr'"),
        (_set("training", {"runs": [RUN], "seeds": 0}), "seeds"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_config_mistake_is_refused_before_any_job_with_what_to_fix(tmp_path, change, expected):
    assert expected in dry_run_of(tmp_path, change)


def test_every_mapping_of_the_schema_is_closed_except_the_two_open_by_design():
    open_ones = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" or "properties" in node:
                closed = (
                    node.get("additionalProperties") is False or node.get("unevaluatedProperties") is False
                )
                if not closed and "$ref" not in node:
                    open_ones.append(where)
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    walk(yaml.safe_load((SCHEMAS / "config.schema.yaml").read_text()), "config")
    walk(yaml.safe_load((SCHEMAS / "training_run.schema.yaml").read_text()), "run")
    assert sorted(open_ones) == [
        "config/$defs/model/properties/random",  # checked against the transformers config class
        "config/properties/training/properties/grid",  # each expanded run is checked as a run
    ]


def test_random_settings_are_checked_against_the_transformers_config_class():
    random_models.check_settings("bert", {"num_hidden_layers": 2, "hidden_size": 64})
    random_models.check_settings(
        "gpt2", {"n_layer": 2, "n_embd": 64, "num_hidden_layers": 2}
    )  # attribute_map
    with pytest.raises(
        InputError, match="'num_hidden_layer' is not a setting of BertConfig.*num_hidden_layers"
    ):
        random_models.check_settings("bert", {"num_hidden_layer": 2})
    with pytest.raises(InputError, match="did you mean llama"):
        random_models.check_settings("lama", {})
    with pytest.raises(InputError, match="hidden_size"):
        random_models.check_settings("bert", {"hidden_size": "wide"})


def test_seeds_multiply_every_run_and_set_its_seed(tmp_path):
    runs = training_runs.training_runs(
        {"defaults": SETTINGS, "runs": [{"name": "a"}, {"name": "b"}], "seeds": 2}, "r"
    )
    assert list(runs) == ["a-s0", "a-s1", "b-s0", "b-s1"]
    assert [run.settings["seed"] for run in runs.values()] == [0, 1, 0, 1]
    listed = training_runs.training_runs(
        {"defaults": SETTINGS, "grid": {"init": ["random"]}, "seeds": [7]}, "r"
    )
    assert list(listed) == ["random-s7"] and listed["random-s7"].settings["seed"] == 7
    assert list(training_runs.training_runs({"runs": [RUN]}, "r")) == ["r"]  # no seeds: names unchanged
    with pytest.raises(InputError, match="sets seed"):
        training_runs.training_runs({"runs": [{**RUN, "seed": 1}], "seeds": 2}, "r")


def test_a_grid_value_may_bring_the_settings_that_go_with_it():
    grid = {"dataset": [{"dataset": "wikipedia", "character_spacing": True}, "jigsaw"], "init": ["random"]}
    runs = training_runs.training_runs({"defaults": SETTINGS, "grid": grid}, "r")
    assert list(runs) == ["wikipedia-random", "jigsaw-random"]
    assert runs["wikipedia-random"].settings["character_spacing"] is True
    assert "character_spacing" not in runs["jigsaw-random"].settings
    with pytest.raises(InputError, match="must set dataset itself"):
        training_runs.training_runs({"defaults": SETTINGS, "grid": {"dataset": [{"init": "random"}]}}, "r")


@pytest.mark.parametrize("name", ["..", ".hidden", "a/b", "-x", ""])
def test_run_names_are_safe_folder_names(name):
    with pytest.raises(InputError, match="must be letters"):
        training_runs.training_runs({"runs": [{**RUN, "name": name}]}, "r")
    with pytest.raises(InputError, match="must be letters"):  # a grid value naming a folder elsewhere
        training_runs.training_runs({"defaults": SETTINGS, "grid": {"dataset": ["/data/x.txt"]}}, "r")


def test_a_heatmap_of_a_model_not_in_the_config_is_an_error():
    models = registry.build_registry([{"id": "a/b", "objective": "bidirectional"}], "r")
    assert registry.heatmaps({"heatmap": {"encoder": {"model": "a/b", "layer": 1}}}, models) == {
        "encoder": (models["a--b"], 1)
    }
    with pytest.raises(InputError, match="'x/y' is not in models"):
        registry.heatmaps({"heatmap": {"decoder": {"model": "x/y"}}}, models)
    assert registry.heatmaps({"heatmap": {"decoder": {"model": "a/b"}}}, models) == {
        "decoder": (models["a--b"], None)  # no layer: the model's most representative, from its scores
    }


# ---------------------------------------------------------------- a model that cannot be scored


@pytest.fixture
def tiny_bert(tmp_path) -> Path:
    BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(tmp_path / "bert")
    return tmp_path / "bert"


def job_in(folder: Path, location: str) -> ScoreJob:
    return ScoreJob(
        "org/m", location, "", *(str(folder / f"s.{kind}") for kind in ("parquet", "json", "log"))
    )


def test_scored_model_is_ok(tiny_bert, tmp_path):
    status = score_and_record(job_in(tmp_path, str(tiny_bert)))
    assert status["status"] == "ok" and "reason" not in status
    assert set(pd.read_parquet(tmp_path / "s.parquet")["model_id"]) == {"org/m"}


def test_bad_input_is_failed_with_the_reason_the_command_prints(tmp_path, capsys):
    """The job and `attngeom score` call the same function (engine.score_to_file): the job's reason is
    the command's error line."""
    missing = tmp_path / "nowhere"
    assert main(["score", str(missing), "-o", str(tmp_path / "c.parquet")]) == 2
    printed = capsys.readouterr().err.strip().removeprefix("attngeom: error: ")
    status = score_and_record(job_in(tmp_path, str(missing)))
    assert status["status"] == "failed" and printed.startswith(str(missing)), printed
    assert status["reason"] == portable(printed, {str(missing): "org/m"})
    assert pd.read_parquet(tmp_path / "s.parquet").empty
    assert "attngeom: error: " in (tmp_path / "s.log").read_text()


def raising(error: Exception):
    """An ``open_source`` that raises ``error``, as a source of that kind would."""

    def open_source(*args, **kwargs):
        raise error

    return open_source


def test_an_input_error_is_failed_on_one_line_and_any_other_error_crashed_with_its_traceback(
    tiny_bert, tmp_path, monkeypatch
):
    monkeypatch.setattr(engine, "open_source", raising(InputError("first line\nsecond line")))
    assert score_and_record(job_in(tmp_path, str(tiny_bert))) == {
        "model": "org/m",
        "seconds": pytest.approx(0, abs=60),
        "status": "failed",
        "reason": "first line second line",
    }
    monkeypatch.setattr(engine, "open_source", raising(RuntimeError("broken invariant\ndetails")))
    crash = score_and_record(job_in(tmp_path, str(tiny_bert)))
    assert (crash["status"], crash["reason"]) == ("crashed", "RuntimeError: broken invariant")
    text = (tmp_path / "s.log").read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: broken invariant" in text
    assert pd.read_parquet(tmp_path / "s.parquet").empty


def test_portable_text_holds_no_path_of_this_machine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "models" / "m"
    text = f"{model}/config.json: bad; {tmp_path}/other.txt; {sys.prefix}/lib/x; {Path.home()}/y"
    out = portable(text, {str(model): "org/m"})
    assert out == "org/m/config.json: bad; other.txt; <venv>/lib/x; ~/y"


def test_a_folder_written_atomically_gets_the_umask_modes_even_from_private_writers(tmp_path):
    import torch
    from safetensors.torch import save_file

    old = os.umask(0o022)
    try:
        with atomic_dir(tmp_path / "model") as folder:
            save_file({"w": torch.zeros(2)}, folder / "model.safetensors")  # created 0600 by safetensors
            (folder / "sub").mkdir(mode=0o700)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "model" / "model.safetensors").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "model" / "sub").stat().st_mode) == 0o755


# ---------------------------------------------------------------- on the tiny end-to-end run


def result_files(results: Path) -> list[Path]:
    """Every result a colleague reads (the per-job logs are for the person who ran it)."""
    return [p for p in results.rglob("*") if p.is_file() and "logs" not in p.relative_to(results).parts]


def machine_paths_in(results: Path, paths: list[str]) -> list[str]:
    """Result files (text and Parquet cells) that mention any of ``paths``."""
    found = []
    for file in result_files(results):
        if file.suffix == ".parquet":
            frame = pd.read_parquet(file)
            text = frame.astype(str).to_csv() if not frame.empty else ""
        elif file.suffix in (".csv", ".md", ".tex", ".html", ".json", ".yaml", ".txt"):
            text = file.read_text(errors="replace")
        else:
            continue
        found += [f"{file}: {path}" for path in paths if path in text]
    return found


@pytest.mark.slow
def test_unscorable_models_are_recorded_and_every_table_and_figure_is_made(tiny_run):
    results = tiny_run / "results"
    summary = pd.read_csv(results / "tables" / "summary.csv", keep_default_na=False)
    for model in BROKEN_MODELS:
        status = json.loads((results / "scores" / f"{slug(model)}.status.json").read_text())
        assert status["status"] in ("failed", "crashed") and status["reason"], status
        assert "\n" not in status["reason"] and str(tiny_run) not in status["reason"]
        row = summary[summary["model"] == model].iloc[0]
        assert (row["status"], row["reason"]) == (status["status"], status["reason"])
        assert status["reason"] in (results / "tables" / "table_s2.md").read_text().replace("\\|", "|")
    for name in ("figure_2.png", "figure_s1.png", "figure_s2.png", "heads/local--bad-heads.png"):
        assert (results / "figures" / name).stat().st_size > 0
    reasons = summary.set_index("model")["reason"]
    assert (
        reasons["local/missing"]
        == "local weights local/missing not found; fix the model's `path:` in the config"
    )
    assert (
        "cannot be built" in reasons["random/bad-heads"] and "attention heads" in reasons["random/bad-heads"]
    )


@pytest.mark.slow
def test_a_model_pointed_at_a_missing_folder_after_a_run_is_scored_again_not_kept(tiny_run):
    config = yaml.safe_load((tiny_run / "tiny.yaml").read_text())
    for model in config["models"]:
        if model["id"] == "local/corrupt":
            model["path"] = str(tiny_run / "moved-away")
    (tiny_run / "moved.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    dry = run_snakemake("all", "-n", "--configfile", "moved.yaml", cwd=tiny_run)
    assert {w for rule, w, _ in planned_jobs(dry.stdout) if rule == "score"} == {"slug=local--corrupt"}


@pytest.mark.slow
def test_results_hold_no_machine_path_and_are_readable_by_colleagues(tiny_run):
    results = tiny_run / "results"
    assert machine_paths_in(results, [str(tiny_run), str(tiny_run.resolve()), sys.prefix]) == []
    umask = os.umask(0)
    os.umask(umask)
    private = [
        f"{p} {oct(stat.S_IMODE(p.stat().st_mode))}"
        for p in results.rglob("*")
        if stat.S_IMODE(p.stat().st_mode) != (0o777 if p.is_dir() else 0o666) & ~umask
    ]
    assert private == []


@pytest.mark.slow
def test_the_embedded_default_records_each_configured_id_and_no_machine_path(tmp_path):
    """Every model of config/config.yaml (training left out: its runs take minutes) scored by the
    pipeline: the Parquet's model_id is the config's id, though the packaged models live in the venv."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    config.pop("training")
    (tmp_path / "default.yaml").write_text(yaml.safe_dump(config))
    targets = [f"results/scores/{slug(m['id'])}.parquet" for m in config["models"]]
    run_snakemake(*targets, "--cores", "2", "--configfile", "default.yaml", cwd=tmp_path)
    for model, target in zip(config["models"], targets, strict=True):
        status = json.loads((tmp_path / target).with_suffix(".status.json").read_text())
        assert status["status"] == "ok", status
        assert set(pd.read_parquet(tmp_path / target)["model_id"]) == {model["id"]}
    assert (
        machine_paths_in(tmp_path / "results", [str(tmp_path), sys.prefix, str(Path(sys.prefix).resolve())])
        == []
    )


def test_the_train_rule_restarts_a_run_whose_settings_changed():
    """The rule asks for restart="if-changed"; the behaviour itself is tested with train() (training tests)."""
    from attngeom.training.loop import train

    script = (ROOT / "scripts" / "train_run.py").read_text()
    assert 'restart="if-changed"' in script
    if "restart" not in inspect.signature(train).parameters:
        pytest.skip("attngeom.training.loop.train has no restart= yet (the training change has not landed)")
