"""`attngeom cache clear` removes only what attngeom wrote: files of its own layout inside folders it marked
when it made them. Files anyone else put anywhere in the cache survive, byte for byte; folders of the
layout without the marker (an older attngeom's) are named with the `rm -r` that removes them, and left."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conformance import build, tiny_config
from hubserver import HubServer, pointed_at
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from training_fixtures import tiny, write_corpus

import attngeom
from attngeom import cache, cache_layout
from attngeom.training.corpus import load_corpus

REPO = "org/tiny-llama"
FOREIGN = b"not attngeom's: "


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A cache written by attngeom itself: one repository scored by range, one corpus tokenised."""
    tmp_path = tmp_path_factory.mktemp("filled")
    config = tiny_config(
        "llama", hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1,
        intermediate_size=64, vocab_size=64,
    )  # fmt: skip
    build(config).save_pretrained(tmp_path / "model")
    with HubServer({REPO: tmp_path / "model"}).running() as server, pointed_at(server, tmp_path):
        attngeom.score(REPO, progress=False)
        corpus = write_corpus(tmp_path, 50)
        load_corpus(tiny(tmp_path, corpus, cache_dir=str(tmp_path / "cache" / "training")), progress=False)
    return tmp_path / "cache"


def attngeom_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "cache", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **env),
        timeout=120,
    )


def snapshot(root: Path, markers: bool = True) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes (the markers of attngeom's folders only with ``markers``)."""
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink() and (markers or path.name != cache_layout.MARKER)
    }


def test_the_filled_cache_is_marked_and_cleared_whole(filled, tmp_path, monkeypatch):
    shutil.copytree(filled, tmp_path / "cache", symlinks=True)
    monkeypatch.setenv("ATTNGEOM_CACHE", str(tmp_path / "cache"))
    hub = tmp_path / "cache" / "hub" / "models--org--tiny-llama"
    streams = [p for p in (tmp_path / "cache" / "training").iterdir() if p.is_dir()]
    assert (
        (hub / cache_layout.MARKER).is_file()
        and len(streams) == 1
        and (streams[0] / cache_layout.MARKER).is_file()
    )
    done = cache.clear()
    assert done.freed > 0 and done.left == []
    assert snapshot(tmp_path / "cache") == {}


folder_names = st.sampled_from(["", "hub", "training", "hub/REPO", "hub/REPO/refs", "hub/REPO/COMMIT",
                                "hub/REPO/COMMIT/FILE", "training/STREAM", "hub/models--x--mine", "new/sub"])  # fmt: skip
file_names = st.from_regex(r"[A-Za-z0-9_ -]{1,10}(\.(tex|txt|json|bin|safetensors|header|sha256|size|lock))?",
                           fullmatch=True).filter(lambda name: name not in cache_layout.STREAM_FILES)  # fmt: skip
foreign_files = st.lists(st.tuples(folder_names, file_names, st.binary(max_size=64)), max_size=12)


def _place(root: Path, folder: str) -> Path:
    """A folder of the filled cache named by a pattern (REPO, COMMIT, FILE, STREAM: the real ones)."""
    hub = root / "hub" / "models--org--tiny-llama"
    commit = next(p.name for p in hub.iterdir() if len(p.name) == 40)
    stream = next(p.name for p in (root / "training").iterdir() if p.is_dir())
    concrete = folder.replace("REPO", hub.name).replace("COMMIT", commit).replace("STREAM", stream)
    concrete = concrete.replace("FILE", "model.safetensors")
    return root / concrete


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(foreign=foreign_files, old_entries=st.booleans())
def test_foreign_files_anywhere_in_the_cache_survive_clear(filled, foreign, old_entries):
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        root = Path(scratch) / "cache"
        shutil.copytree(filled, root, symlinks=True)
        patch.setenv("ATTNGEOM_CACHE", str(root))
        for folder, name, data in foreign:
            place = _place(root, folder)
            place.mkdir(parents=True, exist_ok=True)
            (place / name).write_bytes(FOREIGN + data)
        if old_entries:  # what an attngeom before the marker left: its layout, no marker
            old = root / "hub" / "models--org--old" / ("a" * 40)
            shutil.copytree(_place(root, "hub/REPO/COMMIT"), old)
            stream = _place(root, "training/STREAM")
            shutil.copytree(stream, stream.with_name("0" * 16))
            for marker in (
                stream.with_name("0" * 16) / cache_layout.MARKER,
                old.parent / cache_layout.MARKER,
            ):
                marker.unlink(missing_ok=True)
        kept = {
            path: data
            for path, data in snapshot(root, markers=False).items()
            if data.startswith(FOREIGN) or "models--org--old" in path or "0" * 16 in path
        }
        done = cache.clear()
        assert snapshot(root, markers=False) == kept
        assert len(done.left) == 2 * old_entries
        assert all("rm -r" in line for line in done.left)


def test_a_cache_at_home_clears_nothing_of_home(filled, tmp_path):
    """ATTNGEOM_CACHE='~': the user's own ~/training and ~/hub are not the cache's to remove."""
    home = tmp_path / "home"
    (home / "training").mkdir(parents=True)
    (home / "training" / "thesis.tex").write_text("\\chapter{One}")
    (home / "hub").mkdir()
    (home / "hub" / "notes.txt").write_text("mine")
    (home / "hub" / "models--org--mine").mkdir()
    (home / "hub" / "models--org--mine" / "notes.txt").write_text("mine too")
    shutil.copytree(filled / "hub" / "models--org--tiny-llama", home / "hub" / "models--org--tiny-llama")
    result = attngeom_cli({"HOME": str(home), "ATTNGEOM_CACHE": "~"}, "clear")
    assert result.returncode == 0, result.stderr
    assert snapshot(home) == {
        "training/thesis.tex": b"\\chapter{One}",
        "hub/notes.txt": b"mine",
        "hub/models--org--mine/notes.txt": b"mine too",
    }
    assert result.stdout.startswith("freed ")


def test_old_unmarked_entries_are_listed_and_left_with_how_to_remove_them(filled, tmp_path):
    root = tmp_path / "cache"
    shutil.copytree(filled, root, symlinks=True)
    for marker in root.rglob(cache_layout.MARKER):
        marker.unlink()
    before = snapshot(root)
    env = {"ATTNGEOM_CACHE": str(root)}
    listed = attngeom_cli(env, "ls")
    cleared = attngeom_cli(env, "clear")
    assert listed.returncode == 0 and cleared.returncode == 0, listed.stderr + cleared.stderr
    for out in (listed.stdout, cleared.stdout):
        left = [line for line in out.splitlines() if line.startswith("left ")]
        assert len(left) == 2 and all(
            f"no {cache_layout.MARKER}" in line and "rm -r '" in line for line in left
        )
    assert "hub: 0 revisions" in listed.stdout
    assert snapshot(root) == before


def test_a_link_in_an_entry_is_not_followed(filled, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    shutil.copytree(filled, root, symlinks=True)
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "model.safetensors").write_text("mine")
    commit = _place(root, "hub/REPO/COMMIT")
    (commit / "elsewhere").symlink_to(outside)
    (commit / "model.safetensors" / "link.safetensors").symlink_to(outside / "model.safetensors")
    monkeypatch.setenv("ATTNGEOM_CACHE", str(root))
    cache.clear()
    assert (outside / "model.safetensors").read_text() == "mine"
    assert (commit / "elsewhere").is_symlink()


@pytest.mark.parametrize("args", [["ls"], ["clear", REPO, "--revision", "x"], ["clear", REPO]])
def test_a_ref_file_of_other_bytes_is_ignored_not_a_crash(filled, tmp_path, args):
    root = tmp_path / "cache"
    shutil.copytree(filled, root, symlinks=True)
    refs = _place(root, "hub/REPO/refs")
    (refs / "x").write_bytes(b"\x00\xff\xfe")
    (refs / "main").write_bytes(b"\x00\xff\xfe")
    result = attngeom_cli({"ATTNGEOM_CACHE": str(root)}, *args)
    assert "Traceback" not in result.stderr
    if args[-1] == "x":
        assert (
            result.returncode == 2
            and result.stderr.count("\n") == 1
            and "no cached revision 'x'" in result.stderr
        )
    else:
        assert result.returncode == 0, result.stderr
    assert (refs / "main").read_bytes() == b"\x00\xff\xfe"


def test_scoring_with_a_ref_file_of_other_bytes_asks_the_hub_again(filled, tmp_path):
    root = tmp_path / "home" / "cache"
    shutil.copytree(filled, root, symlinks=True)
    ref = _place(root, "hub/REPO/refs") / "main"
    ref.write_bytes(b"\x00\xff\xfe")
    with (
        HubServer({REPO: filled.parent / "model"}).running() as server,
        pointed_at(server, tmp_path / "home"),
    ):
        scores = attngeom.score(REPO, progress=False)
    assert len(scores) and ref.read_text() == server.head(REPO)
