"""The weight-reading layer on unusual and bad input: the right numbers, or one line naming the input.

- The same weights give the same tensors and ``file_hash`` whatever the format or transport.
- Legacy (pre-zip) ``.bin`` files are read safely; a ``.bin`` the safe loader refuses is one line and its
  pickle never runs.
- GGUF without ``head_count``: one line; without ``vocab_size``: read anyway.
- A config head count of the wrong type, zero, or missing (transformers would silently assume a
  default): one line naming the key, for several families and nested sub-configs.
- In-memory models: a shared attention module or a key weight tied to the query weight is scored for
  each layer it serves; ``None`` or a meta-device model is one line.
- Local results are labelled with the file or folder name, never a machine path.
- Hub failures: unreachable (one line after ``CONNECT_TRIES`` quick tries; or the cached copy used), 401 vs 403, and a missing
  repository, revision or file, each one line naming the id.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import zipfile

import gguf
import numpy as np
import pytest
import torch
from conformance import BERT_SIZES, build, tiny_config
from hubserver import HubServer, pointed_at
from huggingface_hub import constants
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel

import attngeom
from attngeom.cli import main
from attngeom.errors import InputError
from attngeom.sources import open_source

REPO = "org/tiny-llama"
LLAMA = {
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 64,
    "vocab_size": 64,
}


def qk(name: str) -> bool:
    return name.endswith(("q_proj.weight", "k_proj.weight"))


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama") / "tiny-llama"
    build(tiny_config("llama", **LLAMA)).save_pretrained(path)
    return path


def as_bin(source_dir, target, legacy: bool):
    """A copy of ``source_dir`` whose weights are a PyTorch .bin (zip format, or the legacy one)."""
    target.mkdir()
    shutil.copy(source_dir / "config.json", target)
    state = load_file(source_dir / "model.safetensors")
    torch.save(state, target / "pytorch_model.bin", _use_new_zipfile_serialization=not legacy)
    assert zipfile.is_zipfile(target / "pytorch_model.bin") is not legacy
    return target


def read_qk(source) -> tuple[dict[str, torch.Tensor], str]:
    """Every q/k tensor of a source, read in name order, and the source's file_hash after reading them."""
    names = sorted(n for n in source.names if qk(n))
    return {name: source.get(name) for name in names}, source.file_hash


def cli_error(args, capsys, out) -> str:
    """The one line the CLI prints for a refused input; nothing is written to ``out``."""
    code = main(["score", *map(str, args), "-o", str(out), "--quiet"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("attngeom: error: "), lines
    assert not out.exists()
    return lines[0]


# --- identical weights, identical bytes ----------------------------------------------------------------


def test_every_format_and_transport_gives_the_same_tensors_and_file_hash(llama_dir, tmp_path):
    reference, reference_hash = read_qk(open_source(llama_dir))
    sources = {
        "zip .bin": lambda: open_source(as_bin(llama_dir, tmp_path / "zip", legacy=False)),
        "legacy .bin": lambda: open_source(as_bin(llama_dir, tmp_path / "legacy", legacy=True)),
        "hub by range": lambda: open_source(REPO),
        "hub full download": lambda: open_source(REPO, full_download=True),
    }
    with HubServer({REPO: llama_dir}).running() as server, pointed_at(server, tmp_path):
        for name, make in sources.items():
            tensors, file_hash = read_qk(make())
            assert tensors.keys() == reference.keys(), name
            for key, tensor in tensors.items():
                assert tensor.dtype == reference[key].dtype and torch.equal(tensor, reference[key]), (
                    name,
                    key,
                )
            assert file_hash == reference_hash, name


def test_a_bin_the_safe_loader_refuses_is_one_line_and_never_runs(llama_dir, tmp_path, capsys):
    marker = tmp_path / "pickle-ran"
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    shutil.copy(llama_dir / "config.json", unsafe)
    torch.save({"payload": _Payload(marker)}, unsafe / "pytorch_model.bin")
    line = cli_error([unsafe], capsys, tmp_path / "out.parquet")
    assert str(unsafe / "pytorch_model.bin") in line and "weights-only" in line
    assert not marker.exists()


class _Payload:
    """Unpickling this creates ``marker``: proof that the pickle ran."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (type(self.marker).touch, (self.marker,))


# --- GGUF metadata ---------------------------------------------------------------------------------------


def write_gguf(path, *, head_count=True, vocab_size=True, embedding=True, tokens=False):
    d, layers = 32, 2
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(layers)
    writer.add_embedding_length(d)
    if head_count:
        writer.add_head_count(4)
    writer.add_head_count_kv(2)
    if vocab_size:
        writer.add_vocab_size(64)
    if tokens:
        writer.add_token_list([f"t{i}" for i in range(48)])
    if embedding:
        writer.add_tensor("token_embd.weight", rng.standard_normal((64, d), dtype=np.float32))
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_q.weight", rng.standard_normal((d, d), dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_k.weight", rng.standard_normal((d // 2, d), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_gguf_without_head_count_is_one_line(tmp_path, capsys):
    path = write_gguf(tmp_path / "no-heads.gguf", head_count=False)
    line = cli_error([path], capsys, tmp_path / "out.parquet")
    assert str(path) in line and "llama.attention.head_count" in line


@pytest.mark.parametrize(
    ("settings", "vocabulary"),
    [({"embedding": True}, 64), ({"embedding": False, "tokens": True}, 48)],
    ids=["from the token embedding", "from the token list"],
)
def test_gguf_without_vocab_size_is_read(tmp_path, settings, vocabulary):
    path = write_gguf(tmp_path / "no-vocab.gguf", vocab_size=False, **settings)
    assert open_source(path).config.vocab_size == vocabulary
    frame = attngeom.score(path, progress=False)
    assert set(frame["layer"]) == {0, 1} and frame["symmetry"].notna().all()


# --- config head counts -------------------------------------------------------------------------------------


def config_dir(tmp_path, model_type: str, edit, **sizes):
    """A folder holding only the config.json of ``model_type`` (weights are never reached), edited."""
    path = tmp_path / model_type
    AutoConfig.for_model(model_type, **sizes).save_pretrained(path)
    raw = json.loads((path / "config.json").read_text())
    edit(raw)
    (path / "config.json").write_text(json.dumps(raw))
    return path


def setting(key, value):
    def edit(raw):
        raw[key] = value

    return edit


def dropping(*keys):
    def edit(raw):
        for key in keys[:-1]:
            raw = raw[key]
        del raw[keys[-1]]

    return edit


CONFIG_CASES = {
    "wrong type": ("bert", setting("num_attention_heads", "eight"), BERT_SIZES, "num_attention_heads"),
    "zero": (
        "bert",
        setting("num_attention_heads", 0),
        BERT_SIZES,
        "num_attention_heads = 0 is not a positive",
    ),
    "negative kv heads": ("llama", setting("num_key_value_heads", -2), LLAMA, "num_key_value_heads = -2"),
    "BERT without heads": ("bert", dropping("num_attention_heads"), BERT_SIZES, "has no num_attention_heads"),
    "GPT-2 without n_head": ("gpt2", dropping("n_head"), {"n_embd": 48, "n_layer": 2}, "has no n_head"),
    "T5 without num_heads": (
        "t5",
        dropping("num_heads"),
        {"d_model": 48, "num_layers": 2},
        "has no num_heads",
    ),
    "Whisper without decoder heads": (
        "whisper",
        dropping("decoder_attention_heads"),
        {"d_model": 48, "encoder_layers": 1, "decoder_layers": 1},
        "has no decoder_attention_heads",
    ),
    "CLIP without vision heads": (
        "clip",
        dropping("vision_config", "num_attention_heads"),
        {},
        "has no vision_config.num_attention_heads",
    ),
}


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_a_bad_or_missing_head_count_is_one_line_naming_the_key(tmp_path, capsys, case):
    model_type, edit, sizes, message = CONFIG_CASES[case]
    path = config_dir(tmp_path, model_type, edit, **sizes)
    line = cli_error([path], capsys, tmp_path / "out.parquet")
    assert f"{path}: config.json" in line and message in line, line


def test_a_head_count_null_by_its_class_default_is_an_absent_part(tmp_path):
    """Hiera's MAE decoder heads (``decoder_num_heads``, None by default): the encoder has no decoder, and
    a saved HieraModel states the null; it is not read as a bad count. A number there is still checked."""
    from attngeom.sources.config import load_config

    path = config_dir(tmp_path, "hiera", setting("decoder_num_heads", None))
    assert load_config(path / "config.json", str(path)).decoder_num_heads is None
    path = config_dir(tmp_path / "two", "hiera", setting("decoder_num_heads", 0))
    with pytest.raises(InputError, match="decoder_num_heads = 0 is not a positive"):
        load_config(path / "config.json", str(path))


# --- in-memory models ---------------------------------------------------------------------------------------


def layer_rows(frame):
    return frame[frame["head"].isna()].set_index("layer")


def test_layers_sharing_one_attention_module_are_each_scored():
    model = build(tiny_config("bert", **BERT_SIZES))
    model.encoder.layer[1].attention = model.encoder.layer[0].attention
    rows = layer_rows(attngeom.score(model, progress=False))
    assert list(rows.index) == [0, 1]
    assert rows.loc[0, "symmetry"] == rows.loc[1, "symmetry"]  # the same module: the same tensors


def test_a_key_weight_tied_to_the_query_weight_is_scored():
    model = build(tiny_config("bert", **BERT_SIZES))
    attention = model.encoder.layer[0].attention.self
    attention.key.weight = attention.query.weight
    rows = layer_rows(attngeom.score(model, progress=False))
    assert abs(rows.loc[0, "symmetry"] - 1.0) < 1e-12  # W_q W_qᵀ is symmetric
    assert abs(rows.loc[1, "symmetry"]) < 1.0 - 1e-6


def test_a_missing_or_meta_device_model_is_one_line():
    with pytest.raises(InputError, match="not a model") as missing:
        attngeom.score(None, progress=False)
    with torch.device("meta"):
        model = AutoModel.from_config(tiny_config("bert", **BERT_SIZES))
    with pytest.raises(InputError, match="meta device") as meta:
        attngeom.score(model, progress=False)
    assert "\n" not in str(missing.value) + str(meta.value)


# --- what results are labelled with --------------------------------------------------------------------------------


def test_local_results_carry_a_name_not_a_machine_path(llama_dir, tmp_path):
    gguf_file = write_gguf(tmp_path / "tiny.gguf")
    assert set(attngeom.score(llama_dir, progress=False)["model_id"]) == {"tiny-llama"}
    assert set(attngeom.score(gguf_file, progress=False)["model_id"]) == {"tiny.gguf"}
    loaded = AutoModel.from_pretrained(llama_dir)
    assert set(attngeom.score(loaded, progress=False)["model_id"]) == {"tiny-llama"}


# --- Hub failures -----------------------------------------------------------------------------------------------


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: connections to it are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class HangingUp:
    """A port on 127.0.0.1 that reads each request's first line and hangs up without an answer."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.1)
        self.port = self.socket.getsockname()[1]
        self.requests: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            connection.settimeout(2)
            try:
                self.requests.append(connection.recv(200).split(b"\r\n")[0].decode(errors="replace"))
            except OSError:
                pass
            connection.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.socket.close()


def test_an_unreachable_hub_is_one_line_after_the_quick_tries(tmp_path):
    """What the code controls, not the wall clock: ``CONNECT_TRIES`` connections, each with the short
    connect timeout, then one line."""
    from attngeom import network
    from attngeom.sources import hub

    assert hub.CONNECT_TRIES * (hub.CONNECT_TIMEOUT_S + network.FIRST_WAIT_S) <= 10  # seconds at most
    server = HangingUp()
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the checkout under test, where it is not installed
        "HF_ENDPOINT": f"http://127.0.0.1:{server.port}",
        "HF_HOME": str(tmp_path / "hf"),
        "ATTNGEOM_CACHE": str(tmp_path / "cache"),
        "HF_HUB_DISABLE_XET": "1",
    }
    out = tmp_path / "out.parquet"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "attngeom.cli", "score", REPO, "-o", str(out), "--quiet"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
    finally:
        server.close()
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"attngeom: error: {REPO}: cannot reach the Hub")
    heads = [line for line in server.requests if line.startswith(f"HEAD /{REPO}/resolve/main/config.json")]
    assert len(heads) == hub.CONNECT_TRIES, server.requests
    assert not out.exists()


def test_an_unreachable_hub_uses_the_cached_copy(llama_dir, tmp_path):
    with HubServer({REPO: llama_dir}).running() as server, pointed_at(server, tmp_path):
        online = attngeom.score(REPO, progress=False)
        constants.ENDPOINT = f"http://127.0.0.1:{closed_port()}"
        constants.HUGGINGFACE_CO_URL_TEMPLATE = (
            constants.ENDPOINT + "/{repo_id}/resolve/{revision}/{filename}"
        )
        offline = attngeom.score(REPO, progress=False)
    assert offline["file_hash"].iloc[0] == online["file_hash"].iloc[0]
    assert set(offline["revision"]) == {server.commit}


HUB_CASES = {
    "no token": ({}, REPO, None, ["gated repository (HTTP 401)", "set HF_TOKEN"]),
    "a refused token": (
        {"HF_TOKEN": "wrong"},
        REPO,
        None,
        ["refused the token (HTTP 401)", "invalid or expired"],
    ),
    "a token without access": ({"HF_TOKEN": "nope"}, REPO, None, ["no access", "HTTP 403", "request access"]),
    "no such repository": ({"HF_TOKEN": "secret"}, "org/nothing", None, ["no such repository"]),
    "no such revision": ({"HF_TOKEN": "secret"}, REPO, "v9", ["no revision 'v9'"]),
    "no such file": ({"HF_TOKEN": "secret"}, f"{REPO}/other.gguf", None, ["no file other.gguf"]),
}


@pytest.mark.parametrize("case", list(HUB_CASES))
def test_hub_refusals_are_one_line_saying_what_to_do(llama_dir, tmp_path, monkeypatch, case):
    environment, model, revision, messages = HUB_CASES[case]
    server = HubServer({REPO: llama_dir}, token="secret", no_access=frozenset({"nope"}))
    with server.running(), pointed_at(server, tmp_path):
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(InputError) as refused:
            attngeom.score(model, revision=revision, progress=False)
    text = str(refused.value)
    assert "\n" not in text and text.startswith(model.split("/other")[0]), text
    assert all(message in text for message in messages), text
    if case == "a token without access":
        assert "set HF_TOKEN" not in text  # the token is set; it is access that is missing


def test_a_head_count_stated_null_where_its_class_default_is_null_is_read(tmp_path, capsys):
    """ZoeDepth's patch transformer (built only for several bin configurations) has a null head count by
    default: a file stating it null is read; a null where the class's default is a number is refused."""
    from attngeom.sources.config import load_config

    path = config_dir(tmp_path, "zoedepth", setting("patch_transformer_num_attention_heads", None))
    config = load_config(path / "config.json", str(path))
    assert config.patch_transformer_num_attention_heads is None
    path = config_dir(tmp_path, "bart", setting("decoder_attention_heads", None), d_model=48)
    line = cli_error([path], capsys, tmp_path / "out.parquet")
    assert "decoder_attention_heads = None is not a positive integer" in line, line
