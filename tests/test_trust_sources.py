"""Hostile and malformed inputs to the scoring side: one line naming the input, nothing written outside the
caches, no weight scored as what it is not.

- A hub endpoint whose ``X-Repo-Commit`` is a path (``../../victim.txt``): refused before any file is
  written, the records never carry it.
- A folder with ``model.safetensors`` and a stale ``old.safetensors``: only ``model.safetensors`` is read;
  several other files sharing a tensor name, or an index naming shards outside the folder: one line.
- A damaged range cache (a tensor byte, a header byte): verified against the hash written with it, and
  re-fetched.
- Counts far beyond the tensors present (GGUF ``block_count`` 10^12, ``num_hidden_layers`` 10^9), a FIFO in
  place of a weights file, a malformed GGUF alignment, head count or tensor, a short ``layer_types``: one line.
- Several models: every error line names its model; a 1-D q weight: one line, no torch warnings.
- Outputs inside the model folder refused; ``-o folder/`` writes ``folder/<slug>.parquet``.
- A model reached through a symlink or a Hub cache snapshot is labelled as the user named it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
import warnings
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from conformance import build, tiny_config
from hubserver import HubServer, pointed_at
from safetensors.torch import load_file, save_file
from test_sources_reliability import LLAMA, REPO  # the tiny Llama the source tests share

import attngeom
from attngeom.cli import main
from attngeom.sources.hub import Repo

METRICS = ["symmetry", "directionality", "norm"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("llama") / "tiny-llama"
    build(tiny_config("llama", **LLAMA)).save_pretrained(path)
    return path


@pytest.fixture
def llama_copy(llama_dir, tmp_path) -> Path:
    return Path(shutil.copytree(llama_dir, tmp_path / "tiny-llama"))


def scores_of(model) -> np.ndarray:
    frame = attngeom.score(model, progress=False)
    return frame.sort_values(["layer", "head"], na_position="last")[METRICS].to_numpy(dtype=float)


def cli(args, capsys) -> tuple[int, list[str]]:
    code = main(["score", *map(str, args), "--quiet"])
    return code, capsys.readouterr().err.strip().splitlines()


def one_error(args, capsys) -> str:
    code, lines = cli(args, capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attngeom: error: "), lines
    return lines[0]


def edit_weights(folder: Path, **changes: torch.Tensor | None) -> None:
    """Replace (or with None remove) tensors of ``folder/model.safetensors``."""
    state = load_file(folder / "model.safetensors")
    for name, tensor in changes.items():
        full = name.replace("__", ".")
        if tensor is None:
            state.pop(full)
        else:
            state[full] = tensor
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


Q0 = "layers.0.self_attn.q_proj.weight"


# --- 1. a hostile endpoint --------------------------------------------------------------------------------------


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("honest_answers", [0, 1], ids=["lies at once", "lies once checked"])
@pytest.mark.parametrize(
    "hostile", ["../../../../victim.txt", "../../../../../../victim.txt", "main", "x" * 40]
)
def test_a_commit_that_is_not_a_commit_is_refused_and_writes_nothing_outside_the_caches(
    llama_dir, tmp_path, capsys, hostile, honest_answers
):
    home = tmp_path / "home"
    (home / "victim.txt").parent.mkdir()
    for folder in (tmp_path, home):
        (folder / "victim.txt").write_text("precious")
    out = tmp_path / "out" / "scores.parquet"
    before = files_under(tmp_path)
    server = HubServer({REPO: llama_dir})
    server.commit_header, server.honest_answers = hostile, honest_answers
    with server.running(), pointed_at(server, home):
        line = one_error([REPO, "-o", out], capsys)
    assert REPO in line and "commit" in line
    changed = {p for p, data in files_under(tmp_path).items() if before.get(p) != data}
    caches = (home / "hf", home / "cache")
    assert not [p for p in changed if not any(c in p.parents for c in caches)]
    assert not out.exists()


def test_a_remembered_ref_that_is_not_a_commit_is_not_used(llama_dir, tmp_path):
    with HubServer({REPO: llama_dir}).running() as server, pointed_at(server, tmp_path):
        assert set(attngeom.score(REPO, progress=False)["revision"]) == {server.commit}
    (ref,) = (tmp_path / "cache").rglob("refs/main")
    with pointed_at(server, tmp_path):
        assert Repo.resolve(REPO, "config.json", None, None).commit == server.commit  # remembered
        ref.write_text("../../../elsewhere")
        assert Repo.resolve(REPO, "config.json", None, None).commit is None  # not a commit: not used


# --- 3, 4. which files of a folder are read -------------------------------------------------------------------


def test_a_stale_safetensors_beside_model_safetensors_is_not_read(llama_dir, llama_copy):
    state = load_file(llama_copy / "model.safetensors")
    stale = {name: torch.ones_like(t) for name, t in state.items()}
    save_file(stale, llama_copy / "old.safetensors")
    np.testing.assert_allclose(scores_of(llama_copy), scores_of(llama_dir), rtol=1e-12, atol=1e-12)


def test_a_tensor_name_in_two_files_is_refused(llama_copy, capsys):
    state = load_file(llama_copy / "model.safetensors")
    (llama_copy / "model.safetensors").rename(llama_copy / "a.safetensors")
    save_file({Q0: state[Q0]}, llama_copy / "b.safetensors")
    line = one_error([llama_copy, "-o", llama_copy.parent / "o.parquet"], capsys)
    assert Q0 in line and "a.safetensors" in line and "b.safetensors" in line


@pytest.mark.parametrize(
    "shard", ["../outside.safetensors", "/tmp/outside.safetensors", "sub/../../x.safetensors"]
)
def test_an_index_naming_a_shard_outside_the_folder_is_refused(llama_copy, capsys, shard):
    outside = llama_copy.parent / "outside.safetensors"
    shutil.copy(llama_copy / "model.safetensors", outside)
    names = load_file(llama_copy / "model.safetensors")
    index = {"metadata": {}, "weight_map": dict.fromkeys(names, shard)}
    (llama_copy / "model.safetensors.index.json").write_text(json.dumps(index))
    (llama_copy / "model.safetensors").unlink()
    line = one_error([llama_copy, "-o", llama_copy.parent / "o.parquet"], capsys)
    assert shard in line and "outside the model folder" in line


# --- 5. the range cache -----------------------------------------------------------------------------------------


def test_a_damaged_range_cache_is_fetched_again(llama_dir, tmp_path):
    expected = scores_of(llama_dir)
    with HubServer({REPO: llama_dir}).running() as server, pointed_at(server, tmp_path):
        np.testing.assert_allclose(scores_of(REPO), expected, rtol=1e-12, atol=1e-12)
        entries = [p for p in (tmp_path / "cache").rglob("*.safetensors") if "q_proj" in p.name]
        assert entries
        for entry in entries:  # one changed byte in every cached q tensor: still a valid file
            data = bytearray(entry.read_bytes())
            data[-1] ^= 0x40
            entry.write_bytes(bytes(data))
        (header,) = (tmp_path / "cache").rglob("*.header")
        text = header.read_bytes()
        assert b'"F64"' in text
        header.write_bytes(text.replace(b'"F64"', b'"I64"'))  # a header that decodes to other tensors
        sent = sum(server.bytes_sent.values())
        np.testing.assert_allclose(scores_of(REPO), expected, rtol=1e-12, atol=1e-12)
        assert sum(server.bytes_sent.values()) > sent  # fetched again, not read around
        sent = sum(server.bytes_sent.values())
        np.testing.assert_allclose(scores_of(REPO), expected, rtol=1e-12, atol=1e-12)
        assert sum(server.bytes_sent.values()) == sent  # and the repaired cache is used


# --- 11, 14. counts, alignment and shapes -------------------------------------------------------------------


def write_gguf(path: Path, *, blocks: int = 2, hidden: int = 32, heads: int = 4, alignment=None) -> Path:
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_uint64("llama.block_count", blocks)
    writer.add_embedding_length(hidden)
    writer.add_head_count(heads)
    writer.add_head_count_kv(2)
    writer.add_vocab_size(64)
    if alignment is not None:
        writer.add_string("general.alignment", alignment)
    for i in range(2):
        writer.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((32, 32), dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_k.weight", rng.standard_normal((16, 32), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"blocks": 10**12}, "block_count"),
        ({"hidden": 30}, "not divisible"),
        ({"alignment": "32"}, "general.alignment"),
    ],
)
def test_malformed_gguf_metadata_is_one_line(tmp_path, capsys, settings, words):
    path = write_gguf(tmp_path / "m.gguf", **settings)
    line = one_error([path, "-o", tmp_path / "o.parquet"], capsys)
    assert words in line and str(path) in line


def offset_field(data: bytes, name: bytes) -> int:
    """Where the data offset of tensor ``name`` lies in a GGUF file's tensor table."""
    at = data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)
    (n_dims,) = struct.unpack_from("<I", data, at)
    return at + 4 + 8 * n_dims + 4


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("a name twice", "GGUF tensor 'blk.0.attn_q.weight' is listed twice"),
        ("overlapping", "lies at data offset 0, expected 4096: it overlaps the tensors before it"),
        ("a gap", "leaves a gap"),
    ],
)
def test_a_gguf_tensor_table_that_llama_cpp_refuses_is_one_line(tmp_path, capsys, damage, words):
    """Issue 43, point 6: a tensor listed twice, or lying over another (or apart: llama.cpp reads only
    tensors back to back)."""
    path = write_gguf(tmp_path / "m.gguf")
    data = bytearray(path.read_bytes())
    if damage == "a name twice":
        at = data.index(b"blk.0.attn_k.weight")
        data[at : at + 19] = b"blk.0.attn_q.weight"
    else:
        at = offset_field(bytes(data), b"blk.0.attn_k.weight")
        data[at : at + 8] = struct.pack("<Q", 0 if damage == "overlapping" else 8192)
    path.write_bytes(data)
    line = one_error([path, "-o", tmp_path / "o.parquet"], capsys)
    assert words in line and str(path) in line and "llama.cpp refuses" in line, line
    assert not (tmp_path / "o.parquet").exists()


def test_a_billion_layers_in_config_json_is_one_line(llama_copy, capsys):
    config = json.loads((llama_copy / "config.json").read_text())
    config["num_hidden_layers"] = 10**9
    (llama_copy / "config.json").write_text(json.dumps(config))
    line = one_error([llama_copy, "-o", llama_copy.parent / "o.parquet"], capsys)
    assert "num_hidden_layers" in line


@pytest.mark.parametrize("tensor", [torch.zeros(0, 32), torch.tensor(1.0)])
def test_an_empty_or_scalar_q_tensor_is_one_line(llama_copy, capsys, tensor):
    edit_weights(llama_copy, **{Q0: tensor})
    line = one_error([llama_copy, "-o", llama_copy.parent / "o.parquet"], capsys)
    assert Q0 in line


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("layer_types", ["full_attention"]),
        ("no_rope_layers", [1]),
        ("layer_types", ["full_attention", "banana"]),
    ],
)
def test_short_or_unknown_per_layer_lists_are_one_line(llama_copy, capsys, key, value):
    config = json.loads((llama_copy / "config.json").read_text())
    config[key] = value
    (llama_copy / "config.json").write_text(json.dumps(config))
    line = one_error([llama_copy, "-o", llama_copy.parent / "o.parquet"], capsys)
    assert key in line or "banana" in line


# --- 12. inputs that are not regular files ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "m.gguf"])
def test_a_fifo_in_place_of_a_file_is_refused_at_once(llama_copy, tmp_path, capsys, name):
    if name == "m.gguf":
        target = model = tmp_path / name
    else:
        target, model = llama_copy / name, llama_copy
        target.unlink()
    os.mkfifo(target)
    result: list = []
    worker = threading.Thread(
        target=lambda: result.append(cli([model, "-o", tmp_path / "o.parquet"], capsys))
    )
    worker.start()
    worker.join(60)
    if worker.is_alive():  # blocked opening the FIFO: a writer releases it, then the test fails
        os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        worker.join()
    assert result, "the scorer waited on the FIFO"
    code, lines = result[0]
    assert code == 2 and len(lines) == 1 and "not a regular file" in lines[0], lines


# --- 16, 17. what error lines say -------------------------------------------------------------------------------


def test_with_several_models_each_error_line_names_its_model(llama_dir, tmp_path, capsys):
    bad = Path(shutil.copytree(llama_dir, tmp_path / "bad-llama"))
    edit_weights(bad, **{"layers.0.self_attn.k_proj.weight": torch.zeros(8, 32)})
    code, lines = cli([llama_dir, bad, "-o", tmp_path / "out"], capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"attngeom: error: {bad}: ") and "do not match" in lines[0]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["tiny-llama.parquet"]


@pytest.mark.parametrize("shape", [(32 * 32,), (2, 16, 32)])
def test_a_q_weight_that_is_not_a_matrix_is_one_line_without_warnings(llama_copy, capsys, shape):
    edit_weights(llama_copy, **{Q0: torch.zeros(shape)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = one_error([llama_copy, "-o", llama_copy.parent / "o.parquet"], capsys)
    assert "not a matrix" in line and str(llama_copy) in line
    assert not caught, [str(w.message) for w in caught]


# --- 19. outputs -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["scores.parquet", "x.safetensors", "sub/new.parquet"])
def test_a_new_file_inside_the_model_folder_is_refused(llama_copy, capsys, name):
    before = sorted(p.name for p in llama_copy.rglob("*"))
    line = one_error([llama_copy, "-o", llama_copy / name], capsys)
    assert "model being read" in line
    assert sorted(p.name for p in llama_copy.rglob("*")) == before


def test_an_output_with_a_trailing_slash_is_a_folder(llama_dir, tmp_path, capsys):
    code, _ = cli([llama_dir, "-o", f"{tmp_path / 'newdir'}/"], capsys)
    assert code == 0
    assert (tmp_path / "newdir").is_dir()
    assert [p.name for p in (tmp_path / "newdir").iterdir()] == ["tiny-llama.parquet"]


# --- 20. labels ---------------------------------------------------------------------------------------------------


def test_a_symlinked_model_is_labelled_with_the_link_name(llama_dir, tmp_path):
    link = tmp_path / "my-finetuned-llama"
    link.symlink_to(llama_dir)
    assert set(attngeom.score(link, progress=False)["model_id"]) == {"my-finetuned-llama"}


def test_a_hub_cache_snapshot_is_labelled_with_its_repository_and_commit(llama_dir, tmp_path):
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--org--tiny-llama" / "snapshots" / commit
    shutil.copytree(llama_dir, snapshot)
    frame = attngeom.score(snapshot, progress=False)
    assert set(frame["model_id"]) == {REPO} and set(frame["revision"]) == {commit}
