"""The tables and figures, each declared once (``attngeom.artifacts``): the workflow's rules, report
captions, model groups, config schema and targets are those of the declarations."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml
from pipeline_support import planned_jobs, run_snakemake

from attngeom.artifacts import ARTIFACT, ARTIFACTS, MODEL_GROUPS, RULES
from attngeom.pipeline.paper_config import paper_groups
from attngeom.pipeline.zoo import ENTRY_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "workflow"
RULE_FILES = sorted((WORKFLOW / "rules").glob("*.smk"))


def test_the_config_schema_names_exactly_the_declared_model_groups():
    schema = yaml.safe_load((WORKFLOW / "schemas" / "config.schema.yaml").read_text())
    enums = []

    def walk(node):
        if isinstance(node, dict):
            if "groups" in node.get("properties", {}):
                enums.append(node["properties"]["groups"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert len(enums) == 2  # a model's groups and a zoo's
    assert all(groups["items"]["enum"] == list(MODEL_GROUPS) for groups in enums)
    zoo = next(groups for groups in enums if groups["default"])
    assert zoo["default"] == ENTRY_DEFAULTS["groups"]


def test_each_kind_of_model_joins_the_groups_that_hold_it():
    language, vision, pair = (
        paper_groups("language", "autoregressive"),
        paper_groups("vision", "bidirectional"),
        paper_groups("language", "encoder-decoder"),
    )
    assert (language, vision, pair) == (("table_s2", "table_s3", "figure_2"), ("figure_s1",), ("figure_s2",))
    assert sorted(language + vision + pair) == sorted(MODEL_GROUPS)  # every group holds one kind


def test_every_artifact_has_its_rule_caption_and_drawer():
    text = "\n".join(path.read_text() for path in RULE_FILES)
    rules = set(re.findall(r"^\s*rule (\w+):", text, re.M)) | set(re.findall(r"use rule \w+ as (\w+)", text))
    assert set(RULES) <= rules
    captions = {path.stem for path in (WORKFLOW / "report").glob("*.rst")} - {"workflow"}
    assert {a.caption for a in ARTIFACTS} == captions  # none missing, none left without its item
    for artifact in ARTIFACTS:
        module, _, name = artifact.drawer.rpartition(".")
        assert callable(getattr(importlib.import_module(f"attngeom.{module}"), name)), artifact.drawer
    assert "caption=" not in text and "category=" not in text  # every report item: **shown(name)
    assert set(re.findall(r'shown\("(\w+)"\)', text)) == set(ARTIFACT)


@pytest.mark.slow
def test_the_workflow_makes_every_declared_artifact(tmp_path):
    """A dry run of `all` on the embedded config (models of every group, training runs): a job of each
    artifact's rule."""
    jobs = {rule for rule, _, _ in planned_jobs(run_snakemake("all", "-n", cwd=tmp_path).stdout)}
    assert set(RULES) <= jobs, sorted(set(RULES) - jobs)
