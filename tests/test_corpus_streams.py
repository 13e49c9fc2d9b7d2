"""A Hub corpus read within bounds (issue 32, points 3 and 4): a trickling server, a Content-Length lie, a
compressed endless line, a redirect loop, a hostile commit, a server error, a damaged or empty data file,
a missing text column: each one line naming the dataset, no traceback, no hang, no other library's lines.

The corpora are served by tests/datasetserver.py on 127.0.0.1; ``attngeom train`` runs in a subprocess
whose reader bounds (seconds, retries) are shortened where the defaults would make a test slow.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasetserver import serving
from hubserver import pointed_at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from training_fixtures import TINY, sentences

from attngeom import network
from attngeom.cli import main
from attngeom.training import hub_documents
from attngeom.training.config import ConfigError
from attngeom.training.document_files import read_documents
from attngeom.training.hub_documents import HttpFile

REPO = "org/corpus"
SHORT = (
    "import os, attngeom.network as n; os.environ['ATTNGEOM_NET_WINDOW_S'] = '3'; h.PROGRESS_S = 0.2; "
    "n.FIRST_WAIT_S = 0.01"
)


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


GOOD = parquet_bytes(pa.table({"text": sentences(60)}))


@pytest.fixture
def corpus(tmp_path):
    """A served repository whose one data file (and the server's faults) each test sets."""
    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    with serving({REPO: {"main": folder}}) as hub:
        hub.folder = folder
        yield hub


def train(hub, tmp_path: Path, patch: str = SHORT, timeout: float = 120) -> subprocess.CompletedProcess:
    """``attngeom train`` on the served corpus (reader bounds set by ``patch``); a hang fails the test."""
    code = (
        "import sys; import attngeom.training.hub_documents as h; "
        f"{patch}; from attngeom.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    settings = [f"{k}={v}" for k, v in TINY.items()] + [f"dataset=hf:{REPO}", "steps=1", "batch_size=2"]
    settings += [f"cache_dir={tmp_path / 'cache'}", "grad_accum=1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env |= {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", code, "train", "--quiet", "--out", str(tmp_path / "run"), *settings]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def one_error(done: subprocess.CompletedProcess, *words: str) -> str:
    """The single error line of a failed run, naming the dataset and ``words``; the lines before it may
    only be attngeom's own progress lines."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and lines, done.stderr[-3000:]
    assert lines[-1].startswith("attngeom: error: "), done.stderr[-3000:]
    progress = (" read in ", " for the Hub to ")
    assert all(line.startswith("attngeom: ") and any(p in line for p in progress) for line in lines[:-1]), (
        lines
    )
    assert f"hf:{REPO}" in lines[-1] and all(word in lines[-1] for word in words), lines[-1]
    return lines[-1]


# ---------------------------------------------------------------- point 3: bounded waits, bounded lines


def test_a_trickling_server_is_an_error_after_progress_lines(corpus, tmp_path):
    (corpus.folder / "data/train.parquet").write_bytes(GOOD)
    corpus.faults["data/train.parquet"] = "slow"
    done = train(corpus, tmp_path)
    one_error(done, "data/train.parquet", "B/s", "under ATTNGEOM_NET_MIN_RATE")
    assert " read in " in done.stderr  # progress while it trickled


def test_a_content_length_lie_is_one_error_not_a_retry_line_each(corpus, tmp_path):
    (corpus.folder / "data/train.parquet").write_bytes(GOOD)
    corpus.faults["data/train.parquet"] = "lie"
    done = train(corpus, tmp_path)
    assert one_error(done, "data/train.parquet", "download failed after 5 tries")
    assert not [line for line in done.stderr.splitlines()[:-1] if "for the Hub to" not in line]


def test_a_compressed_endless_json_line_is_refused_without_holding_it(corpus, tmp_path):
    """70 MiB of one JSON line in 0.2 MiB of gzip: refused once 64 MiB have streamed past."""
    line = b'{"text": "' + b"word " * (14 << 20) + b'"}\n'
    (corpus.folder / "data/train.jsonl.gz").write_bytes(gzip.compress(line, compresslevel=1))
    done = train(corpus, tmp_path, patch="pass")
    one_error(done, "data/train.jsonl.gz:1", "more than 64 MiB")


# ---------------------------------------------------------------- point 4: one line for each failure


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    """A served repository of its own name (``datasets``' listings are cached per name and commit), read
    by ``attngeom train`` in this process."""
    import datasets

    folder = tmp_path / "repo"
    (folder / "data").mkdir(parents=True)
    repo = f"org/{tmp_path.name[-40:].strip('_-.')}"
    with serving({repo: {"main": folder}}) as hub, pointed_at(hub, tmp_path / "home"):
        monkeypatch.setattr(datasets.config, "HF_ENDPOINT", hub.url)
        monkeypatch.setattr(network, "FIRST_WAIT_S", 0.01)
        hub.folder, hub.repo = folder, repo
        yield hub


def train_here(hub, tmp_path, capfd) -> str:
    """The one line ``attngeom train`` prints on the served corpus, checked to be all it printed."""
    settings = [f"{k}={v}" for k, v in TINY.items()] + [f"dataset=hf:{hub.repo}", "steps=1", "batch_size=2"]
    settings += [f"cache_dir={tmp_path / 'cache'}", "grad_accum=1"]
    code = main(["train", "--quiet", "--out", str(tmp_path / "run"), *settings])
    err = capfd.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("attngeom: error: "), err
    assert f"hf:{hub.repo}" in err[0] and not (tmp_path / "run" / "final").exists()
    return err[0]


@pytest.mark.parametrize(
    ("name", "content", "fault", "words"),
    [
        (
            "train.parquet",
            parquet_bytes(pa.table({"text": pa.array([], pa.string())})),
            None,
            ["no documents"],
        ),
        ("train.jsonl", b'{"text": "a b c"}\n{"text": "d e\n', None, ["train.jsonl:2", "not a JSON object"]),
        ("train.parquet", b"<html><body>Bad gateway</body></html>", None, ["not a readable Parquet file"]),
        ("train.parquet", GOOD[: len(GOOD) // 2], None, ["not a readable Parquet file"]),
        ("train.parquet", GOOD, "loop", ["redirects in a loop"]),
        ("train.parquet", GOOD, "chain", ["too many redirects, not a loop"]),
        ("train.parquet", GOOD, "500", ["HTTP 500"]),
        (
            "train.parquet",
            parquet_bytes(pa.table({"body": ["x y"], "id": [1]})),
            None,
            ["'text'", "'body'", "'id'"],
        ),
        ("train.jsonl", b'{"body": "x y", "id": 1}\n', None, ["'text'", "'body'", "'id'"]),
    ],
    ids=[
        "zero rows",
        "malformed line",
        "html",
        "truncated",
        "redirect loop",
        "redirect chain",
        "http 500",
        "no column",
        "no key",
    ],
)
def test_a_bad_corpus_is_one_line_naming_the_dataset(
    in_process, tmp_path, capfd, name, content, fault, words
):
    (in_process.folder / "data" / name).write_bytes(content)
    if fault:
        in_process.faults[f"data/{name}"] = fault
    line = train_here(in_process, tmp_path, capfd)
    assert all(word in line for word in words), line


def test_a_server_that_closes_after_every_byte_is_one_error_within_the_rate_window(
    in_process, tmp_path, capfd, monkeypatch
):
    """A byte a request, so no count of failures grows: the rate over the window (2 s here) ends it."""
    monkeypatch.setenv(network.WINDOW_VARIABLE, "2")
    (in_process.folder / "data/train.parquet").write_bytes(GOOD)
    in_process.faults["data/train.parquet"] = "drip"
    line = train_here(in_process, tmp_path, capfd)
    assert "data/train.parquet" in line and "B/s), under ATTNGEOM_NET_MIN_RATE=1024 " in line, line


@pytest.mark.parametrize(("error", "printed"), [(BrokenPipeError, False), (ValueError, True)])
def test_the_served_corpus_is_quiet_only_when_a_client_hangs_up(corpus, capfd, error, printed):
    """The drip test reads stderr whole: a client hanging up mid-reply (as the reader does) must not
    print the stand-in server's traceback there, while a fault of the server itself still does."""
    try:
        raise error("mid-reply")
    except error:
        corpus.server.handle_error(None, ("127.0.0.1", 0))
    assert ("mid-reply" in capfd.readouterr().err) is printed


@pytest.mark.parametrize(
    ("sha", "status", "words"), [("../../x", None, "'../../x'"), (None, 500, "HTTP 500")]
)
def test_a_hostile_or_failing_dataset_info_is_one_line(in_process, tmp_path, capfd, sha, status, words):
    (in_process.folder / "data/train.parquet").write_bytes(GOOD)
    in_process.info_sha, in_process.info_status = sha, status
    line = train_here(in_process, tmp_path, capfd)
    assert words in line and "server error" not in line.lower(), line  # the server's own words stay out


def test_the_cli_prints_no_other_librarys_lines_before_its_own(corpus, tmp_path):
    """The whole command, as a user runs it: a damaged Parquet file is the one line, nothing of datasets."""
    (corpus.folder / "data/train.parquet").write_bytes(b"<html><body>Bad gateway</body></html>")
    done = train(corpus, tmp_path, patch="pass")
    one_error(done, "not a readable Parquet file")
    assert len(done.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- every stream: text or one error


NAMES = ["x.jsonl", "x.jsonl.gz", "x.json.bz2", "x.txt", "x.txt.xz", "x.jsonl.zst", "x.parquet", "x.csv"]


def compressed(name: str, data: bytes) -> bytes:
    import bz2
    import lzma

    import zstandard

    for suffix, compress in (
        (".gz", gzip.compress),
        (".bz2", bz2.compress),
        (".xz", lzma.compress),
        (".zst", zstandard.ZstdCompressor().compress),
    ):
        if name.endswith(suffix):
            return compress(data)
    return data


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    lines=st.lists(
        st.one_of(
            st.builds(lambda v: json.dumps({"text": v}), st.text(max_size=20) | st.none() | st.integers()),
            st.text(max_size=20),
        ),
        max_size=5,
    ).map(lambda lines: "\n".join(lines).encode()),
    noise=st.binary(max_size=40),
    damage=st.booleans(),
)
def test_any_data_file_gives_text_or_one_error_naming_it(name, lines, noise, damage):
    data = compressed(name, lines)
    data = data[: len(data) // 2] + noise if damage else data
    try:
        docs = list(read_documents(f"dataset 'd' {name}", name, io.BytesIO(data), "text"))
    except ConfigError as err:
        assert "\n" not in str(err) and name in str(err)
        return
    assert all(isinstance(doc, str) and doc for doc in docs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(min_size=0, max_size=5000),
    reads=st.lists(st.tuples(st.integers(-10, 6000), st.integers(0, 3), st.integers(0, 7000)), max_size=6),
)
def test_the_ranged_reader_reads_what_a_local_file_would(corpus, data, reads, monkeypatch):
    """Any sequence of seeks and reads of a served file gives the bytes a local file gives."""
    monkeypatch.setattr(hub_documents, "BLOCK", 1000)
    (corpus.folder / "data/blob.bin").write_bytes(data)
    commit = corpus.find(REPO, "main")[0]
    remote = HttpFile(f"{corpus.url}/datasets/{REPO}/resolve/{commit}/data/blob.bin", "blob")
    local = io.BytesIO(data)
    for offset, whence, size in reads:
        offset = max(offset, 0) if whence == 0 else offset
        whence = min(whence, 2)
        assert remote.seek(offset, whence) == local.seek(offset, whence)
        assert remote.read(size) == local.read(size)
