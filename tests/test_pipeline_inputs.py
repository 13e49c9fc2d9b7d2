"""The pipeline's own inputs under bad values: the results folder, the zoo's pinned list (hand-edited or
fuzzed), the target of `zoo resolve --update`, and models whose weights are missing or cannot be built,
each refused in one line or recorded as that model's failure, never a traceback."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pipeline_support import ROOT, TINY_MODELS, run_snakemake, write_config
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from attngeom.cli import main
from attngeom.errors import InputError
from attngeom.pipeline import outcome, pinned, random_models, registry, zoo

SHA = "0123456789abcdef0123456789abcdef01234567"
GOOD = {
    "id": "org/model",
    "revision": SHA,
    "model_type": "bert",
    "weights": "safetensors",
    "pipeline_tag": "fill-mask",
    "library": "transformers",
    "downloads": 12,
    "n_params": 1000,
    "gated": False,
}
ZOO_ENTRY = {"name": "t", "limit": 5}


# ---------------------------------------------------------------- results: the folder of every output


@pytest.mark.parametrize("value", ["", " ", "/", "//", "/tmp/.."])
def test_a_results_folder_at_the_root_is_refused_in_one_line(value):
    with pytest.raises(InputError, match=r"^config: results: .* filesystem's root; name a folder") as err:
        registry.results_folder(value)
    assert "\n" not in str(err.value)


def test_a_results_folder_elsewhere_is_kept_as_written():
    assert [registry.results_folder(v) for v in ("results", "out/run1", "/tmp/r")] == [
        "results",
        "out/run1",
        "/tmp/r",
    ]


def test_the_schema_refuses_an_empty_results_folder():
    config = {"results": "", "models": [{"id": "m", "objective": "bidirectional"}]}
    with pytest.raises(WorkflowError, match="'' should be non-empty"):
        validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))


def test_results_at_the_root_stops_the_dag_before_any_job(tmp_path):
    config = yaml.safe_load(write_config(tmp_path / "c.yaml", TINY_MODELS[:1]).read_text())
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({**config, "results": "/"}))
    result = run_snakemake("all", "-n", "--configfile", "c.yaml", cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert (
        "config: results: '/' would put every output at the filesystem's root"
        in result.stdout + result.stderr
    )


# ---------------------------------------------------------------- the zoo's pinned list


def pinned_zoo(folder: Path, models, **document) -> zoo.Zoo:
    entry = zoo.Zoo.from_config({**ZOO_ENTRY, "pinned": str(folder / "pinned.yaml")})
    body = {"name": "t", "query": entry.query, "models": models, **document}
    (folder / "pinned.yaml").write_text(yaml.safe_dump(body, allow_unicode=True))
    return entry


@pytest.mark.parametrize(
    "change,message",
    [
        ({"n_params": "lots"}, "org/model: n_params: 'lots' must be a whole number"),
        ({"model_type": ["bert"]}, "org/model: model_type: ['bert'] must be a model_type name"),
        ({"n_params": -3}, "org/model: n_params: -3 must be a whole number ≥ 0"),
        ({"gated": "no"}, "org/model: gated: 'no' must be true or false"),
        ({"revision": "main"}, "org/model: revision: 'main' must be a 40-digit commit sha"),
        ({"weights": "onnx"}, "org/model: weights: 'onnx' must be one of safetensors"),
        ({"file": "../../etc/x.gguf"}, "org/model: file: '../../etc/x.gguf' must be the repository's .gguf"),
        ({"id": "../escape"}, "../escape: id: '../escape' must be a Hub id"),
        ({"id": 7}, "models[0]: id: 7 must be a Hub id"),
        ({"id": "org/\nm"}, "'org/\\nm': id: 'org/\\nm' must be a Hub id"),  # named on one line
        ({"n_parms": 5}, "org/model: unknown key 'n_parms'"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_hand_edited_pinned_entry_is_refused_naming_the_entry_and_the_key(tmp_path, change, message):
    entry = pinned_zoo(tmp_path, [{**GOOD, **change}])
    with pytest.raises(InputError) as err:
        zoo.zoo_entries(entry)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_pinned_list_naming_a_model_twice_or_without_its_commit_is_refused(tmp_path):
    with pytest.raises(InputError, match="org/model is listed twice"):
        zoo.read_pinned(pinned_zoo(tmp_path, [GOOD, GOOD]))
    with pytest.raises(InputError, match="org/model: no 'revision'"):
        zoo.read_pinned(pinned_zoo(tmp_path, [{"id": "org/model"}]))


def test_a_pinned_list_as_resolve_writes_it_becomes_registry_entries(tmp_path):
    gguf = {
        **GOOD,
        "id": "org/g",
        "weights": "gguf",
        "file": "sub/m.Q8_0.gguf",
        "model_type": None,
        "n_params": None,
    }
    entries = zoo.zoo_entries(pinned_zoo(tmp_path, [GOOD, gguf]))
    models = registry.build_registry(entries, "results")
    assert [(m.id, m.location, m.n_params) for m in models.values()] == [
        ("org/model", "org/model", 1000),
        ("org/g", "org/g/sub/m.Q8_0.gguf", None),
    ]


def test_a_hand_edited_pinned_entry_stops_the_dag_with_one_line(tmp_path):
    entry = pinned_zoo(tmp_path, [{**GOOD, "n_params": "lots"}])
    (tmp_path / "zoo.yaml").write_text(yaml.safe_dump({"zoo": {**ZOO_ENTRY, "pinned": str(entry.pinned)}}))
    result = run_snakemake("all", "-n", "--configfile", "zoo.yaml", cwd=tmp_path, check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "ValueError" not in output
    assert "org/model: n_params: 'lots' must be a whole number ≥ 0 (or left out)" in output


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
KEYS = st.sampled_from([*pinned.CHECKS, "other"])
VALUES = st.one_of(
    JSON, st.sampled_from([SHA, "org/m", "m.gguf", "bert", "gguf", "", "/", 0, -1, True, math.inf, math.nan])
)
ENTRY = st.dictionaries(KEYS, VALUES, max_size=8) | st.builds(
    lambda e: {**GOOD, **e}, st.dictionaries(KEYS, VALUES)
)
DOCUMENT = st.one_of(
    st.text(max_size=200).map(lambda text: ("text", text)),
    st.lists(ENTRY | JSON, max_size=4).map(lambda models: ("models", models)),
    JSON.map(lambda document: ("document", document)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(DOCUMENT)
def test_any_pinned_list_gives_entries_or_one_line_never_a_traceback(document):
    kind, value = document
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "pinned.yaml")
        entry = zoo.Zoo.from_config({**ZOO_ENTRY, "pinned": str(path)})
        if kind == "text":
            path.write_text(value)
        elif kind == "models":
            path.write_text(yaml.safe_dump({"name": "t", "query": entry.query, "models": value}))
        else:
            path.write_text(yaml.safe_dump(value))
        try:
            models = registry.build_registry(zoo.zoo_entries(entry), "results")
        except InputError as err:
            assert "\n" not in str(err) and str(err)
            return
    for model in models.values():
        assert pinned.SHA.fullmatch(model.revision) and model.kind == "hub"
        assert model.n_params is None or model.n_params >= 0


# ---------------------------------------------------------------- zoo resolve --update: what it may replace


@pytest.mark.parametrize(
    "target,message",
    [
        ("zoo.yaml", "is the config itself"),
        ("./zoo.yaml", "is the config itself"),
        ("notes.yaml", "is not a pinned list written by `attngeom zoo resolve`"),
        ("folder", "is not a file"),
    ],
)
def test_resolve_update_replaces_only_a_pinned_list(tmp_path, monkeypatch, capsys, target, message):
    monkeypatch.chdir(tmp_path)
    config = {"zoo": {**ZOO_ENTRY, "pinned": target}}
    Path("zoo.yaml").write_text("# my config, with comments\n" + yaml.safe_dump(config))
    Path("notes.yaml").write_text("# my notes\nmodels: [a, b]\n")
    Path("folder").mkdir()
    before = {p: p.read_bytes() for p in Path().glob("*.yaml")}
    code = main(["zoo", "resolve", "zoo.yaml", "--update"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("attngeom: error: ") and err.count("\n") == 1, err
    assert message in err
    assert {p: p.read_bytes() for p in Path().glob("*.yaml")} == before


def test_resolve_may_replace_a_pinned_list_or_write_a_new_file(tmp_path):
    entry = pinned_zoo(tmp_path, [GOOD])
    pinned.check_target(entry.pinned, tmp_path / "zoo.yaml")
    pinned.check_target(tmp_path / "new.yaml", tmp_path / "zoo.yaml")


# ---------------------------------------------------------------- the closed config schema, fuzzed


def tiny_config() -> dict:
    return {
        "results": "results",
        "scoring": {"device": "cpu"},
        "figures": {"heatmap": {"encoder": {"model": "m/bert", "layer": 1}}},
        "models": [
            {
                "id": "m/bert",
                "random": {"model_type": "bert", "hidden_size": 32, "num_attention_heads": 2},
                "objective": "bidirectional",
                "n_params": 5,
                "groups": ["table_s2"],
            },
            {"id": "m/local", "path": "weights", "objective": "autoregressive"},
        ],
    }


PLACES = st.sampled_from(
    [
        (),
        ("results",),
        ("scoring",),
        ("scoring", "device"),
        ("scoring", "max_threads"),
        ("figures",),
        ("figures", "heatmap", "encoder"),
        ("figures", "heatmap", "encoder", "layer"),
        ("models",),
        ("models", 0),
        ("models", 0, "id"),
        ("models", 0, "random"),
        ("models", 0, "random", "hidden_size"),
        ("models", 0, "n_params"),
        ("models", 0, "seed"),
        ("models", 1, "path"),
        ("models", 1, "groups"),
        ("models", 1, "objective"),
    ]
)
EDIT = st.tuples(PLACES, st.sampled_from(["set", "delete", "add"]), st.text(max_size=10), VALUES)


def edited(config: dict, place: tuple, action: str, key: str, value) -> dict:
    """``config`` with the value at ``place`` set or deleted, or ``key`` added to the mapping there (no
    change where the place no longer exists after an earlier edit)."""
    node = config
    try:
        for step in place:
            node = node[step]
    except (KeyError, IndexError, TypeError):
        return config
    if action == "add" and isinstance(node, dict):
        node[key] = value
    elif place and action in ("set", "delete"):
        parent = config
        for step in place[:-1]:
            parent = parent[step]
        if action == "set":
            parent[place[-1]] = value
        else:
            del parent[place[-1]]
    return config


def dag_inputs(config: dict) -> dict:
    """What building the DAG checks of a config without a zoo or training (common.smk, in order)."""
    validate(config, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"))
    results = registry.results_folder(config["results"])
    models = registry.build_registry(list(config.get("models", [])), results)
    registry.heatmaps(config["figures"], models)
    return models


@pytest.fixture(scope="module")
def child_check_once_per_controls():
    """``registry``'s child check of the random controls (a fresh Python importing transformers, a second
    or two) run once per distinct input: its verdict is a function of the JSON it reads, and most fuzzed
    edits leave the controls as they were. Every distinct input still goes through the real child."""
    verdicts: dict[str, str | None] = {}

    def check_once(controls: dict[str, dict]) -> None:
        key = json.dumps(controls)  # what the child reads on its stdin
        if key not in verdicts:
            try:
                random_models.check_in_child(controls)
                verdicts[key] = None
            except InputError as err:
                verdicts[key] = str(err)
        if verdicts[key] is not None:
            raise InputError(verdicts[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "check_in_child", check_once)
        yield verdicts


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EDIT, min_size=1, max_size=3))
@example([(("models", 0, "n_params"), "set", "", math.inf)])
@example([(("models", 0, "n_params"), "set", "", math.nan)])
@example([(("results",), "set", "", "")])
@example([(("models", 0, "random", "hidden_size"), "set", "", [1])])
@example([(("models", 0, "id"), "set", "", "")])  # an id that makes no file name
def test_any_edit_of_a_config_builds_its_models_or_gives_one_clear_error(
    child_check_once_per_controls, edits
):
    config = tiny_config()
    for edit in edits:
        config = edited(config, *edit)
    try:
        models = dag_inputs(config)
    except WorkflowError as err:  # the schema's answer: Snakemake prints what failed and where
        assert "Error validating config file" in str(err)
        return
    except InputError as err:
        assert "\n" not in str(err) and str(err).startswith("config: ")
        return
    for model in models.values():
        assert model.n_params is None or (math.isfinite(model.n_params) and model.n_params >= 0)
        assert registry.score_resources(model, config["scoring"]).mem_mb > 0


# ---------------------------------------------------------------- weights that are missing or cannot be built


def job_in(folder: Path, location: str) -> outcome.ScoreJob:
    files = [str(folder / name) for name in ("s.parquet", "s.status.json", "s.log")]
    return outcome.ScoreJob("my/model", location, "", *files, local=True)


def test_a_missing_local_path_is_that_models_failure_not_a_hub_download(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = registry.build_registry(
        [{"id": "my/model", "path": "org/name", "objective": "bidirectional"}], "r"
    )
    assert registry.weights_input(model["my--model"]) == []  # no input: Snakemake does not stop the DAG
    status = outcome.score_and_record(job_in(tmp_path, "org/name"))
    assert status["status"] == "failed"
    assert status["reason"] == "local weights org/name not found; fix the model's `path:` in the config"
    assert pd.read_parquet(tmp_path / "s.parquet").empty
    assert "attngeom: error: local weights org/name not found" in (tmp_path / "s.log").read_text()


def test_existing_or_rule_built_weights_are_an_input_and_hub_models_have_none(tmp_path):
    (tmp_path / "w").mkdir()
    entries = [
        {"id": "a", "path": str(tmp_path / "w"), "objective": "bidirectional"},
        {"id": "org/b", "objective": "bidirectional"},
        {"id": "c", "random": {"model_type": "bert"}, "objective": "bidirectional"},
        {"id": "d", "training_dir": "r/training/d/final", "objective": "autoregressive"},
    ]
    models = registry.build_registry(entries, "r")
    assert [registry.weights_input(m) for m in models.values()] == [
        [str(tmp_path / "w")],
        [],
        ["r/models/random/c"],  # not built yet: the random_model rule makes it first
        ["r/training/d/final"],
    ]


def test_a_random_control_transformers_cannot_build_is_recorded_as_failed(tmp_path):
    settings_ = {"hidden_size": 30, "num_attention_heads": 4, "num_hidden_layers": 1}
    random_models.check_settings("bert", settings_)  # the config class accepts it: the DAG is built
    folder = tmp_path / "models" / "random" / "bad"
    logged = random_models.build_or_note("bert", settings_, 0, folder)
    assert "cannot be built" in logged and "30" in logged
    assert [p.name for p in folder.iterdir()] == [random_models.FAILED_NOTE]
    status = outcome.score_and_record(job_in(tmp_path, str(folder)))
    assert status["status"] == "failed" and status["reason"].startswith("random control bert")
    assert "not a multiple of the number of attention heads" in status["reason"]
    assert json.loads((tmp_path / "s.status.json").read_text()) == status
    assert not list(folder.parent.glob(".*tmp*"))


def test_a_random_control_that_builds_leaves_no_note(tmp_path):
    folder = tmp_path / "good"
    logged = random_models.build_or_note("bert", {"hidden_size": 32, "num_attention_heads": 2}, 0, folder)
    assert logged.endswith("parameters") and (folder / "model.safetensors").is_file()
    assert outcome.local_problem(str(folder)) is None and not (folder / random_models.FAILED_NOTE).exists()
    assert os.path.isfile(folder / "config.json")


def test_long_ids_get_file_names_the_filesystem_takes_when_the_registry_is_built(tmp_path):
    ids = ["中" * 31, "中" * 31 + "文", "a" * 300]
    entries = [{"id": i, "random": {"model_type": "bert"}, "objective": "bidirectional"} for i in ids]
    models = registry.build_registry(entries, str(tmp_path))
    assert [m.id for m in models.values()] == ids and len(set(models)) == 3
    for model in models.values():
        Path(model.location).mkdir(parents=True)  # the random control's folder, under its slug
        (tmp_path / f".{model.slug}.status.json.0123abcd.tmp").write_text("{}")
