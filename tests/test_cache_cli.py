"""`attngeom cache ls|clear` on a cache filled by real scoring runs against the hub-like server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conformance import build, tiny_config
from hubserver import HubServer

REPOS = ("org-a/tiny-llama", "org-b/tiny-llama")


def tiny_llama(path, layers):
    config = tiny_config(
        "llama",
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=layers,
        intermediate_size=64,
        vocab_size=64,
    )
    build(config).save_pretrained(path)
    return path


def attngeom(tmp_path, *args, server=None):
    env = dict(os.environ, ATTNGEOM_CACHE=str(tmp_path / "cache"), HF_HOME=str(tmp_path / "hf"))
    env.update(HF_HUB_DISABLE_XET="1", HF_ENDPOINT=server.url if server else "http://127.0.0.1:9")
    return subprocess.run(
        [sys.executable, "-m", "attngeom.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """Two repositories scored, the first at two commits: three cached revisions."""
    tmp_path = tmp_path_factory.mktemp("cache")
    server = HubServer({REPOS[0]: tiny_llama(tmp_path / "a1", 1), REPOS[1]: tiny_llama(tmp_path / "b", 1)})
    with server.running():
        for repo in REPOS:
            assert (
                attngeom(tmp_path, "score", repo, "-o", "x.parquet", "--quiet", server=server).returncode == 0
            )
        old = server.head(REPOS[0])
        new = server.add_revision(REPOS[0], tiny_llama(tmp_path / "a2", 2))
        result = attngeom(tmp_path, "score", REPOS[0], "-o", "x.parquet", "--quiet", server=server)
        assert result.returncode == 0, result.stderr
    return tmp_path, old, new


def rows(tmp_path):
    """(repo, revision, refs, files) of each listed revision, and the whole output."""
    result = attngeom(tmp_path, "cache", "ls")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["REPO", "REVISION", "REFS", "FILES", "SIZE"]
    table = [tuple(line.split()[:4]) for line in lines[1:] if not line.startswith(("hub:", "training"))]
    return table, result.stdout


def test_ls_lists_each_repository_revision_with_its_files(filled):
    tmp_path, old, new = filled
    table, out = rows(tmp_path)
    assert [row[:3] for row in table] == [
        (REPOS[0], old, "-"),
        (REPOS[0], new, "main"),
        (REPOS[1], old, "main"),
    ]
    # one cached tensor per q and k weight: 2 a layer, plus the shard's header files
    files = {row[1] + row[0]: int(row[3]) for row in table}
    assert files[new + REPOS[0]] > files[old + REPOS[0]] >= 2
    assert "hub: 3 revisions" in out


def test_clear_one_revision_then_one_repository_then_all(filled, tmp_path):
    source, old, new = filled
    subprocess.run(["cp", "-r", str(source / "cache"), str(tmp_path / "cache")], check=True)
    result = attngeom(tmp_path, "cache", "clear", REPOS[0], "--revision", "main")
    assert result.returncode == 0 and result.stdout.startswith("freed "), result.stderr
    assert [row[:2] for row in rows(tmp_path)[0]] == [(REPOS[0], old), (REPOS[1], old)]
    assert not (tmp_path / "cache" / "hub" / "models--org-a--tiny-llama" / "refs" / "main").exists()
    assert attngeom(tmp_path, "cache", "clear", REPOS[1]).returncode == 0
    assert [row[:2] for row in rows(tmp_path)[0]] == [(REPOS[0], old)]
    assert attngeom(tmp_path, "cache", "clear").returncode == 0
    assert rows(tmp_path)[0] == [] and list((tmp_path / "cache" / "hub").iterdir()) == []


@pytest.mark.parametrize(
    "args, says",
    [
        (["org-c/none"], "org-c/none is not in the cache"),
        ([REPOS[1], "--revision", "v9"], "no cached revision 'v9'"),
        (["--revision", "main"], "--revision needs a REPO"),
        (["../../etc"], "is not in the cache"),
    ],
)
def test_clear_refuses_what_is_not_cached_in_one_line(filled, tmp_path, args, says):
    source, _, _ = filled
    subprocess.run(["cp", "-r", str(source / "cache"), str(tmp_path / "cache")], check=True)
    result = attngeom(tmp_path, "cache", "clear", *args)
    assert result.returncode == 2 and result.stderr.startswith("attngeom: error: ") and says in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert len(rows(tmp_path)[0]) == 3
