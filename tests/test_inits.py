"""The init arms, each declared once (``attngeom.training.inits``): the model does what the declaration says,
the comparisons and the figures' styles cover every arm, and no other source file writes the arms out."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
import yaml

from attngeom.report.score_figures import TRAINED_MARKERS
from attngeom.report.training_figures import COLOURS, LINE_MARKS, STYLES
from attngeom.training.config import CHOICES, TrainConfig
from attngeom.training.inits import ARMS, AUTHORS, EFFECTS, INITS, PAPER_GRID, REFERENCE, SYMMETRIC
from attngeom.training.model import attention_modules, build_model, head_symmetry

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "attngeom"
WIDTH = 64
TINY = {"n_layers": 2, "hidden_size": WIDTH, "n_heads": 4, "intermediate_size": 64, "seq_len": 16}


@pytest.mark.parametrize("arm", ARMS, ids=lambda arm: arm.name)
def test_each_arm_initialises_as_declared(arm):
    torch.manual_seed(0)
    model = build_model(TrainConfig(init=arm.name, **TINY), vocab_size=100)
    symmetry = head_symmetry(model)
    expected = {"query": 1.0, "skew": -1.0}.get(arm.key)
    if expected is None:
        assert symmetry.abs().max() < 0.5  # two independent draws: about 0
    else:
        assert torch.allclose(symmetry, torch.full_like(symmetry, expected), atol=1e-5)
    weights = torch.cat([a.query.weight.detach().flatten() for a in attention_modules(model)])
    scale = 1 / (3 * WIDTH) ** 0.5 if arm.fresh_linear else 0.02  # PyTorch's U(±1/√d), or BERT's N(0, 0.02)
    assert weights.std().item() == pytest.approx(scale, rel=0.1)
    assert (arm.name in SYMMETRIC) == arm.symmetric


def test_every_arm_is_compared_with_declared_arms_and_drawn_apart():
    assert CHOICES["init"] == INITS and TrainConfig().init == REFERENCE
    assert {reference for _, reference in EFFECTS} <= set(INITS)
    assert {candidate for candidate, _ in EFFECTS} == set(INITS) - {REFERENCE}
    assert all((name, REFERENCE) in EFFECTS for name in INITS if name != REFERENCE)
    assert AUTHORS in SYMMETRIC and REFERENCE in PAPER_GRID and AUTHORS in PAPER_GRID
    for styles in (COLOURS, STYLES, LINE_MARKS, TRAINED_MARKERS):
        assert set(INITS) <= set(styles)  # no arm drawn with a fallback
    assert len({(arm.colour, arm.line, arm.marker) for arm in ARMS}) == len(ARMS)
    assert len({arm.marker for arm in ARMS}) == len(ARMS)  # Figures 2/S1/S2 tell trained models apart


def test_the_settings_schema_offers_exactly_the_declared_arms():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "training_settings.schema.yaml").read_text())
    assert schema["properties"]["init"]["enum"] == list(INITS)


INIT_WORDS = re.compile(r"\binits?\b|_inits?\b|\binit_|INIT")
"""A line about init arms: ``init``, ``inits``, ``config.init``, ``reference_init``, ``INIT``."""


def files_naming(name: str, package: Path = PACKAGE) -> set[str]:
    """The source files that write the arm ``name`` out: anywhere (code or prose) for a name that is no
    word of its own (``torch_default``); for one that is (``random``, ``symmetric``, ``skew``: also a model's
    role and the regulariser's target), as a string on a line about inits."""
    found = set()
    for path in package.rglob("*.py"):
        text = path.read_text()
        if "_" in name:
            if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text):
                found.add(str(path.relative_to(package)))
            continue
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and node.value == name:
                if INIT_WORDS.search(lines[node.lineno - 1].replace("__init__", "")):
                    found.add(str(path.relative_to(package)))
    return found


@pytest.mark.parametrize("name", INITS)
def test_an_arms_name_is_written_in_at_most_three_source_files(name):
    files = files_naming(name)
    assert len(files) <= 3, sorted(files)


def test_the_name_finder_sees_code_and_prose_but_not_other_vocabularies(tmp_path):
    package = tmp_path / "attngeom"
    package.mkdir()
    (package / "a.py").write_text('X = "torch_default_symmetric"\n')
    (package / "b.py").write_text('"""Prose naming torch_default_symmetric."""\n')
    (package / "c.py").write_text('def f(config):\n    return config.init == "random"\n')
    (package / "d.py").write_text('def f(row):\n    return row.role == "random"\n')  # a role, not an init
    (package / "e.py").write_text('def g(init):\n    return init == "torch_default"\n')
    assert files_naming("torch_default_symmetric", package) == {"a.py", "b.py"}
    assert files_naming("random", package) == {"c.py"}
    assert files_naming("torch_default", package) == {"e.py"}
