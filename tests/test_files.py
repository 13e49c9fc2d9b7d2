"""Atomic writes: all or nothing, and the user's umask, not mkstemp's private mode."""

import os
import stat

import pytest

from attngeom.files import atomic_dir, atomic_path, cache_dir, write_text


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_file_gets_the_umask_mode(tmp_path, umask_027):
    target = write_text(tmp_path / "sub" / "a.csv", "x\n")
    assert target.read_text() == "x\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_failed_write_leaves_nothing_and_keeps_the_old_file(tmp_path):
    target = write_text(tmp_path / "a.txt", "old")
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_temporary_keeps_the_suffix(tmp_path):
    with atomic_path(tmp_path / "figure.pdf") as temporary:
        assert temporary.suffix == ".pdf" and temporary.parent == tmp_path
        temporary.write_bytes(b"%PDF")
    assert (tmp_path / "figure.pdf").read_bytes() == b"%PDF"


def test_directory_replaces_the_old_one_only_on_success(tmp_path, umask_027):
    target = tmp_path / "final"
    with atomic_dir(target) as folder:
        (folder / "a").write_text("1")
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    with pytest.raises(RuntimeError), atomic_dir(target) as folder:
        (folder / "b").write_text("2")
        raise RuntimeError("interrupted")
    assert [p.name for p in target.iterdir()] == ["a"]
    with atomic_dir(target) as folder:
        (folder / "b").write_text("2")
    assert [p.name for p in target.iterdir()] == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_cache_dir_follows_attngeom_cache_then_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNGEOM_CACHE", str(tmp_path / "c"))
    assert cache_dir("hub") == tmp_path / "c" / "hub"
    monkeypatch.delenv("ATTNGEOM_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir("training") == tmp_path / "x" / "attngeom" / "training"
