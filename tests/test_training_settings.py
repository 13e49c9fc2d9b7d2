"""Training settings, declared once: the workflow's JSON schema is made from TrainConfig's declarations and
agrees with its checks, and every setting has a range a model can be built with and a machine can hold,
checked before anything is allocated, each refusal one line (issue 43, point 7)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from training_fixtures import TINY

from attngeom.cli import main
from attngeom.training.config import (
    CHOICES,
    FIELDS,
    RANGES,
    RESOURCE_KEYS,
    ConfigError,
    TrainConfig,
    coerce,
    make_config,
    settings_schema,
    settings_schema_text,
    value_problem,
)
from attngeom.training.memory import BYTES_PER_PARAMETER, GRADIENT_COPY_BYTES, check_fits, total_bytes
from attngeom.training.model import build_model

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_FILE = ROOT / "workflow" / "schemas" / "training_settings.schema.yaml"
WRITE_IT = (
    "python -c 'from attngeom.training.config import settings_schema_text as t; print(t(), end=\"\")' > "
    "workflow/schemas/training_settings.schema.yaml"
)

# ---------------------------------------------------------------- one declaration, one schema


def test_the_workflow_schema_is_the_one_made_from_the_declarations():
    assert SCHEMA_FILE.read_text() == settings_schema_text(), f"write it again: {WRITE_IT}"
    properties = yaml.safe_load(SCHEMA_FILE.read_text())["properties"]
    assert set(properties) == set(FIELDS) | set(RESOURCE_KEYS)
    for name, allowed in CHOICES.items():
        assert tuple(properties[name]["enum"]) == allowed, name


def accepted(name: str, value) -> bool:
    """Whether TrainConfig takes ``value`` for ``name`` as a YAML file or the pipeline gives it."""
    try:
        return value_problem(name, coerce(name, value)) is None
    except ConfigError:
        return False


NUMBERS = (
    st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.sampled_from([0, 1, 8, 2**63 - 1, 2**63])
)
ANY = st.none() | st.booleans() | NUMBERS | st.text(max_size=8) | st.sampled_from(["", " ", "\x1c", "sotu"])


def edges(name: str) -> list:
    """The ends of a setting's range and the numbers just past them (as an integer and as a float)."""
    if name not in RANGES:
        return [None]
    low, high = RANGES[name].low, RANGES[name].high
    near = [low, high, math.nextafter(low, -math.inf), math.nextafter(high, math.inf)]
    if "int" in str(FIELDS[name].type):
        near += [low - 1, high + 1, float(low), int(low) + 0.5]
    return near


@settings(max_examples=1000, deadline=None)
@given(name=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_the_schema_and_the_checks_agree_on_every_value_of_every_setting(name, data):
    """Each setting alone, any JSON value but NaN (JSON has none; TrainConfig refuses it), the ends of its
    range most of all. A string for a number is left out: the CLI's strings are read as numbers
    (``steps=1e3``), a YAML file's are not."""
    kind = str(FIELDS[name].type)
    values = ANY if "str" in kind or name in CHOICES else ANY.filter(lambda v: not isinstance(v, str))
    value = data.draw(st.sampled_from(edges(name) + list(CHOICES.get(name, ()))) | values)
    valid = jsonschema.Draft202012Validator(settings_schema()).is_valid({name: value})
    assert valid == accepted(name, value), (name, value)


def test_the_schema_takes_what_the_cli_takes_where_they_once_differed():
    schema = jsonschema.Draft202012Validator(settings_schema())
    for name, value in (("grad_clip", 0), ("compile", None), ("seq_len", 2**20)):
        assert schema.is_valid({name: value}) and accepted(name, value)
    for name, value in (("seq_len", 2**63 - 1), ("dataset", " "), ("lr", float("inf"))):
        assert not schema.is_valid({name: value}) and not accepted(name, value)


# ---------------------------------------------------------------- ranges a model can build, a machine hold

HUGE = [
    ("seq_len=9223372036854775807", "seq_len"),
    ("hidden_size=4611686018427387904", "hidden_size"),
    ("vocab_size=9223372036854775807", "vocab_size"),
    ("n_layers=1000000000", "n_layers"),
    ("intermediate_size=1e30", "intermediate_size"),
    ("batch_size=1e12", "batch_size"),
    ("steps=" + "9" * 5000, "steps"),
    ("steps=1e9999999999", "steps"),
    ("seed=1e9999999999", "seed"),
    ("lr=1e9999999999", "lr"),
]


@pytest.mark.parametrize(("setting", "name"), HUGE, ids=[h[0][:30] for h in HUGE])
def test_a_setting_past_what_a_model_can_be_is_one_line_before_anything_is_made(
    tmp_path, capsys, setting, name
):
    code = main(["train", "--out", str(tmp_path / "run"), "device=cpu", setting])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and len(err) < 300, err[:400]
    assert err.startswith(f"attngeom: error: training setting {name}=") and "must be" in err
    assert not (tmp_path / "run").exists()


def test_seeds_past_any_seed_are_one_line(tmp_path, capsys):
    code = main(["train", "--out", str(tmp_path / "r-{seed}"), "--seeds", "0,1e9999999999", "device=cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "training setting seed='1e9999999999': must be" in err
    assert not list(tmp_path.iterdir())


def test_the_parameter_count_is_the_built_models():
    for objective in ("encoder", "decoder"):
        for sizes in ({}, {"seq_len": 600, "hidden_size": 48, "n_heads": 3, "intermediate_size": 80}):
            config = make_config({**TINY, **sizes, "objective": objective})
            model = build_model(config, vocab_size=123)
            assert config.parameters(123) == sum(p.numel() for p in model.parameters()), (objective, sizes)


TOO_LARGE = {"n_layers": 1024, "hidden_size": 65536, "n_heads": 64, "intermediate_size": 262144}


def test_a_model_larger_than_memory_is_refused_from_its_parameter_count(tmp_path, capsys):
    config = make_config(TOO_LARGE)
    need = config.parameters(config.vocab_size) * BYTES_PER_PARAMETER
    assert need > total_bytes(torch.device("cpu"))  # 1024 layers of 65,536: 22 T parameters
    settings = [f"{k}={v}" for k, v in TOO_LARGE.items()]
    for extra in ([], ["--seeds", "0,1"]):
        out = tmp_path / ("r-{seed}" if extra else "r")
        code = main(["train", "--out", str(out), *extra, "device=cpu", *settings])
        err = capsys.readouterr().err.strip()
        assert code == 2 and err.count("\n") == 0, err
        assert f"of {config.parameters(config.vocab_size):,} parameters" in err and "GiB" in err
        assert not list(tmp_path.iterdir())


def test_what_fits_passes_and_one_row_too_many_is_refused():
    cpu = torch.device("cpu")
    check_fits(make_config(TINY), cpu)  # a tiny model: nothing to say
    rows = make_config({**TINY, "seq_len": 2**20, "batch_size": 2**20})
    with pytest.raises(ConfigError, match="rows of activations"):
        check_fits(rows, cpu)


def test_the_recorded_updates_gradient_copy_counts_towards_what_fits():
    """A model that fits at 16 bytes a parameter, but not with the recorded update's float32 copy of its
    gradients, is refused only where that update runs."""
    cpu = torch.device("cpu")
    total = total_bytes(cpu)
    widths = (  # 64 layers, widened 64 at a time: the first too large for this host's memory at 20 bytes
        make_config(
            {
                **TINY,
                "n_layers": 64,
                "hidden_size": h,
                "n_heads": h // 64,
                "intermediate_size": 4 * h,
                "batch_size": 1,
            }
        )
        for h in range(64, 2**16 + 1, 64)
    )
    config = next(
        c for c in widths if c.parameters(c.vocab_size) * (BYTES_PER_PARAMETER + GRADIENT_COPY_BYTES) > total
    )
    check_fits(config, cpu)
    with pytest.raises(ConfigError, match=f"{BYTES_PER_PARAMETER + GRADIENT_COPY_BYTES} bytes a parameter"):
        check_fits(config, cpu, gradient_copy=True)


def test_the_recorded_update_is_counted_where_it_runs():
    config = make_config(TINY)
    assert config.records_update_on("cuda") and not config.records_update_on("cpu")
    assert not config.records_update_on("cuda", world=2)  # DDP: the loss is not recorded
    for off in ({"update_graph": False}, {"compile": False}, {"deterministic": True}):
        assert not make_config({**TINY, **off}).records_update_on("cuda"), off


# ---------------------------------------------------------------- --config files


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("steps: " + "[" * 100_000 + "]" * 100_000 + "\n", "nests deeper than Python can follow"),
        ("a: " + "{b: " * 50_000 + "1" + "}" * 50_000 + "\n", "nests deeper than Python can follow"),
        ("steps: " + "1" * 5000 + "\n", "cannot read training config"),
        ("steps: 5\n".encode("utf-16-le"), "cannot read training config"),  # UTF-16 without its mark
        (b"steps: 5\n\xff\xfe\n", "cannot read training config"),
    ],
    ids=["deep list", "deep mapping", "5000-digit integer", "utf-16 without bom", "not utf-8"],
)
def test_a_config_file_no_parser_reads_is_one_line(tmp_path, capsys, text, fragment):
    path = tmp_path / "train.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["train", "--out", str(tmp_path / "run"), "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and err.count("\n") == 0 and len(err) < 500, err[:600]
    assert not (tmp_path / "run").exists()


def test_a_utf16_config_with_its_byte_order_mark_is_read(tmp_path):
    from attngeom.training.config import read_config_file

    path = tmp_path / "train.yaml"
    path.write_text(json.dumps({"steps": 5, "dataset": "sotu é"}), encoding="utf-16")
    assert read_config_file(path) == {"steps": 5, "dataset": "sotu é"}
    assert TrainConfig(**read_config_file(path)).steps == 5
