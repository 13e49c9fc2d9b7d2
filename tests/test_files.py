"""Atomic writes (all or nothing, the user's umask), output checks before any work, and file names of ids."""

import os
import re
import stat

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attngeom.errors import InputError
from attngeom.files import (
    SLUG_MAX_BYTES,
    atomic_dir,
    atomic_path,
    cache_dir,
    check_folder,
    check_output,
    slug,
    unslug,
    write_text,
)


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


def test_check_output_allows_a_new_or_regular_file(tmp_path):
    assert check_output(tmp_path / "new" / "s.parquet") == tmp_path / "new" / "s.parquet"
    write_text(tmp_path / "old.parquet", "x")
    assert (
        check_output(tmp_path / "old.parquet", protect=[tmp_path / "elsewhere"]) == tmp_path / "old.parquet"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.parquet"]  # the probe left nothing


def test_check_output_protects_the_model_under_any_name(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    write_text(model / "config.json", "{}")
    gguf = write_text(tmp_path / "m.gguf", "GGUF")
    (tmp_path / "link.gguf").symlink_to(gguf)
    refused = [
        (model / "config.json", model),
        (tmp_path / "model" / ".." / "model" / "config.json", model),
        (gguf, gguf),
        (tmp_path / "link.gguf", gguf),
        (model / "scores.parquet", model),  # a new file in the model's folder too: the folder is the model's
    ]
    for output, protected in refused:
        with pytest.raises(InputError, match="file of the model being read"):
            check_output(output, protect=[protected])
    assert check_output(tmp_path / "scores.parquet", protect=[model, gguf])  # beside the model is fine


@pytest.mark.parametrize(
    ("output", "message"),
    [("/dev/null", "not a regular file"), ("/sys/x.parquet", "cannot write in /sys"), ("/", "is a folder")],
)
def test_check_output_refuses_what_cannot_hold_a_result(output, message):
    with pytest.raises(InputError, match=message):
        check_output(output)


def test_check_folder_refuses_a_file(tmp_path):
    write_text(tmp_path / "f", "x")
    with pytest.raises(InputError, match="is a file"):
        check_folder(tmp_path / "f")
    assert check_folder(tmp_path / "new" / "folder") == tmp_path / "new" / "folder"
    assert not (tmp_path / "new").exists()


@given(
    st.lists(
        st.text(st.characters(exclude_characters="/", exclude_categories=("Cs",)), min_size=1),
        min_size=1,
        max_size=4,
    )
)
def test_slug_is_bounded_filesystem_safe_and_reversible_when_short(parts):
    model_id = "/".join(parts)
    name = slug(model_id)
    assert len(name.encode()) <= SLUG_MAX_BYTES
    assert re.fullmatch(r"[A-Za-z0-9._%-]+", name) and not name.startswith((".", "-"))
    if "---" not in name:
        assert unslug(name) == model_id


ID_TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=200)
ID = ID_TEXT.map(lambda text: "/".join(part or "x" for part in text.split("/")))


@given(st.text(st.characters(exclude_categories=("Cs",)), max_size=150), ID, ID)
def test_distinct_ids_have_distinct_slugs_even_past_the_bound(prefix, first, second):
    prefix = "/".join(part or "x" for part in prefix.split("/")) + "/" if prefix else ""
    first, second = prefix + first, prefix + second  # a long common prefix: both shortened alike
    assert (slug(first) == slug(second)) == (first == second)


@pytest.mark.parametrize("model_id", ["中" * 31, "a" * 300, "org/" + "模型-" * 40, "%" * 100 + "a" * 30])
def test_a_long_id_gets_a_short_stable_slug_a_file_can_be_named(tmp_path, model_id):
    name = slug(model_id)
    assert len(name.encode()) <= SLUG_MAX_BYTES and "---" in name
    write_text(tmp_path / f".{name}.tmp0123.status.json", "{}")  # the longest name the pipeline gives it
    assert slug(model_id) == name and slug(model_id + "b") != name


def test_a_shortened_slug_is_its_beginning_and_a_hash_of_the_whole_id():
    assert slug("a" * 300) == "a" * 101 + "---" + "9835fa6bf4e20a9b"


def test_slug_of_hub_ids_reads_naturally():
    assert slug("meta-llama/Llama-3.1-8B") == "meta-llama--Llama-3.1-8B"
    assert slug("m.gguf") == "m.gguf"
    assert slug("gpt2") == "gpt2"
