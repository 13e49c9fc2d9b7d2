"""Damaged checkpoints and corpora give one line naming the file and what to do, through the CLI too."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from training_fixtures import TINY, tiny, write_corpus

from attngeom.errors import InputError
from attngeom.training.config import ConfigError, make_config
from attngeom.training.documents import DocumentSource
from attngeom.training.loop import train


@pytest.fixture
def text_file(tmp_path):
    return write_corpus(tmp_path)


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """A run stopped after 2 of 4 steps: its checkpoint is the one the cases below damage."""
    base = tmp_path_factory.mktemp("stopped")
    config = tiny(base, write_corpus(base), steps=4, log_every=1, checkpoint_every=2)
    return config, train(config, base / "run", progress=False, stop_at=2)


def _copy(stopped_run, tmp_path):
    config, run = stopped_run
    copy = shutil.copytree(run, tmp_path / "run")
    return config, copy, copy / "checkpoint" / "state.pt"


def _edited_state(path, **changes):
    state = torch.load(path, weights_only=True)
    for key, value in changes.items():
        if value is None:
            del state[key]
        else:
            state[key] = value
    torch.save(state, path)


DAMAGES = {
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "garbage": lambda p: p.write_bytes(bytes(range(256)) * 40),
    "a key missing": lambda p: _edited_state(p, optimizer=None),
    "a negative step": lambda p: _edited_state(p, step=-5),
    "a step past the run": lambda p: _edited_state(p, step=10**6),
    "a step that is no number": lambda p: _edited_state(p, step="2"),
    "elapsed not finite": lambda p: _edited_state(p, elapsed_s=float("nan")),
    "not a mapping": lambda p: torch.save([1, 2, 3], p),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_checkpoint_is_one_error_naming_it_and_restart(stopped_run, tmp_path, damage):
    config, run, state = _copy(stopped_run, tmp_path)
    DAMAGES[damage](state)
    with pytest.raises(InputError, match=r"checkpoint .*state\.pt.*--restart") as caught:
        train(config, run, progress=False)
    assert "\n" not in str(caught.value)
    assert not (run / "final").exists()


def test_a_checkpoint_of_another_models_sizes_is_refused(stopped_run, tmp_path):
    config, run, state = _copy(stopped_run, tmp_path)
    other = tiny(tmp_path, write_corpus(tmp_path), steps=2, hidden_size=64, checkpoint_every=2)
    other_run = train(other, tmp_path / "other", progress=False)
    shutil.copy(other_run / "checkpoint" / "state.pt", state)
    with pytest.raises(InputError, match=r"does not fit this run's model \(.*size mismatch.*--restart"):
        train(config, run, progress=False)


def test_the_cli_prints_one_line_for_a_damaged_checkpoint(stopped_run, tmp_path):
    config, run, state = _copy(stopped_run, tmp_path)
    state.write_bytes(b"\x00" * 100)
    args = [f"{k}={v}" for k, v in config.to_dict().items() if v is not None]
    result = subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "train", "--out", str(run), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"attngeom: error: checkpoint {state} cannot be read") and "--restart" in line


def _docs(tmp_path, dataset, **overrides):
    return list(DocumentSource.of(make_config(dict(TINY, dataset=str(dataset)), overrides)).documents())


def test_a_corpus_that_is_not_utf8_names_the_file_line_and_byte(tmp_path):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("first line\nna\xefve caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.txt:2: not UTF-8 text \(byte 0xef.*convert"):
        _docs(tmp_path, corpus)


def test_jsonl_documents_must_be_text_and_nulls_are_counted_not_trained(tmp_path, capsys):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"text": "one"}\n{"text": null}\n{"text": ""}\n{"text": "two"}\n')
    assert _docs(tmp_path, corpus) == ["one", "two"]
    assert "skipped 2 null or empty documents" in capsys.readouterr().err
    for bad, kind in (('["a", "b"]', "list"), ("3", "int"), ('{"a": 1}', "dict")):
        corpus.write_text(f'{{"text": "ok"}}\n{{"text": {bad}}}\n')
        with pytest.raises(ConfigError, match=rf"docs\.jsonl:2: 'text' holds a {kind}, not a string"):
            _docs(tmp_path, corpus)


def test_a_parquet_corpus_must_be_parquet_with_a_text_column(tmp_path):
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match=r"garbage\.parquet: not a readable Parquet file"):
        _docs(tmp_path, garbage)
    numbers = tmp_path / "numbers.parquet"
    pq.write_table(pa.table({"text": [1, 2, 3]}), numbers)
    with pytest.raises(ConfigError, match=r"column 'text' holds int64, not text"):
        _docs(tmp_path, numbers)
    texts = tmp_path / "texts.parquet"
    pq.write_table(pa.table({"text": ["a b", None, "c"]}), texts)
    assert _docs(tmp_path, texts) == ["a b", "c"]


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.one_of(
            st.builds(lambda v: json.dumps({"text": v}), JSON_VALUES),
            st.builds(json.dumps, JSON_VALUES),
            st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
        ),
        max_size=6,
    )
)
def test_fuzzed_jsonl_corpora_give_text_or_one_clear_error(tmp_path, lines):
    """Whatever a .jsonl corpus holds: strings come out as they are, anything else is a ConfigError."""
    corpus = tmp_path / "fuzz.jsonl"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        docs = _docs(tmp_path, corpus)
    except ConfigError as err:
        assert "\n" not in str(err) and "fuzz.jsonl" in str(err)
        return
    assert all(isinstance(doc, str) and doc for doc in docs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_fuzzed_text_and_parquet_files_give_text_or_one_clear_error(tmp_path, data):
    for name in ("fuzz.txt", "fuzz.parquet"):
        corpus = tmp_path / name
        corpus.write_bytes(data)
        try:
            docs = _docs(tmp_path, corpus)
        except ConfigError as err:
            assert "\n" not in str(err) and name in str(err)
            continue
        assert all(isinstance(doc, str) and doc.strip() == doc and doc for doc in docs)
