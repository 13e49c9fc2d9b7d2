"""Hub ids read by HTTP range (attngeom.sources.ranged) against the local hub-like server: the same scores as from disk,
only header and q/k bytes transferred (counted by the server), faults survived or reported clearly, and
no corrupt cache entry left behind. In-process: huggingface_hub's endpoint and cache are pointed at the
server and a temporary HF_HOME, attngeom's range cache at a temporary ATTNGEOM_CACHE."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from urllib.parse import unquote

import gguf
import numpy as np
import pandas as pd
import pytest
import torch
from conformance import build, tiny_config
from hubserver import HubServer, pointed_at
from huggingface_hub import constants
from safetensors.torch import load_file
from zoo_repos import write_llama_gguf

import attngeom
from attngeom import cli, network
from attngeom.errors import InputError
from attngeom.packaged import packaged_model_path
from attngeom.sources import open_source, ranged

SHARDED, SINGLE, BIN, GGUF = "org/sharded-llama", "org/single-qwen2", "org/bin-llama", "org/tiny-gguf"
GGUF_FILE = "tiny-Q8_0.gguf"
SCORES = ["stack", "layer", "head", "symmetry", "directionality", "norm"]


def _llama(path, **save):
    config = tiny_config(
        "llama",
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=3,
        intermediate_size=128,
        vocab_size=256,
    )
    build(config).save_pretrained(path, **save)
    return path


def _bin(path):
    """The same checkpoint as a PyTorch .bin (transformers 5 writes only safetensors)."""
    torch.save(load_file(path / "model.safetensors"), path / "pytorch_model.bin")
    (path / "model.safetensors").unlink()
    return path


def _write_gguf(path) -> None:
    """A llama GGUF with Q8_0 q/k and float32 everything else, so most of the file is not q/k."""
    write_llama_gguf(path, np.random.default_rng(0), d=64, layers=3, vocab=256, ffn_tensors=True)


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    root = tmp_path_factory.mktemp("repos")
    qwen2 = tiny_config(
        "qwen2",
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=3,
        intermediate_size=128,
        vocab_size=256,
    )
    build(qwen2).save_pretrained(root / "single")
    (root / "gguf").mkdir()
    _write_gguf(root / "gguf" / GGUF_FILE)
    return {
        SHARDED: _llama(root / "sharded", max_shard_size="100KB"),
        SINGLE: root / "single",
        BIN: _bin(_llama(root / "bin")),
        GGUF: root / "gguf",
    }


@pytest.fixture
def point(tmp_path, monkeypatch):
    """Point huggingface_hub and attngeom's range cache at a server and a fresh folder."""
    monkeypatch.setattr(network, "FIRST_WAIT_S", 0.01)
    with contextlib.ExitStack() as stack:
        yield lambda server: stack.enter_context(pointed_at(server, tmp_path))


@pytest.fixture
def hub(repos, point):
    """A running server with huggingface_hub pointed at it."""
    with HubServer(repos).running() as server:
        yield point(server)


def score(model, **kwargs) -> pd.DataFrame:
    return attngeom.score(str(model), progress=False, **kwargs)


def assert_same_scores(ours: pd.DataFrame, reference: pd.DataFrame) -> None:
    """The same bytes were read (``file_hash``); the float64 arithmetic on them may differ in the last bit
    where the tensors lie at differently aligned addresses (memory-mapped file vs cache entry)."""
    assert ours["file_hash"].iloc[0] == reference["file_hash"].iloc[0]
    pd.testing.assert_frame_equal(ours[SCORES], reference[SCORES], check_exact=False, rtol=0, atol=1e-12)


def safetensors_layout(path):
    """(header bytes, {tensor: byte count}) of a local safetensors file."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        header = json.loads(handle.read(length))
    sizes = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__"}
    return 8 + length, sizes


def qk(name: str) -> bool:
    return name.endswith(("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias"))


def cache_files(tmp_path):
    return sorted(p for p in (tmp_path / "cache" / "hub").rglob("*") if p.is_file())


def cached_tensors(tmp_path) -> dict[str, int]:
    """Tensor name → byte count of every cache entry (a one-tensor safetensors file)."""
    entries = [p for p in cache_files(tmp_path) if p.name.endswith(".safetensors")]
    return {n: t.nbytes for p in entries for n, t in load_file(p).items() if n == unquote(p.stem)}


def test_sharded_moves_only_headers_and_qk_bytes(hub, repos, tmp_path):
    reference = score(repos[SHARDED])
    frame = score(SHARDED)
    assert_same_scores(frame, reference)
    assert set(frame["revision"]) == {hub.commit}
    expected = 0
    shards = sorted(repos[SHARDED].glob("*.safetensors"))
    for shard in shards:
        header, sizes = safetensors_layout(shard)
        wanted = [n for n in sizes if qk(n)]
        expected += header + sum(sizes[n] for n in wanted) if wanted else 0
    sent = {k: v for k, v in hub.bytes_sent.items() if k.endswith(".safetensors")}
    assert sum(sent.values()) == expected
    assert sum(sent.values()) < 0.5 * sum(s.stat().st_size for s in shards)
    # a re-run transfers no tensor bytes, online or offline
    hub.bytes_sent.clear()
    assert_same_scores(score(SHARDED), reference)
    assert not [k for k in hub.bytes_sent if k.endswith(".safetensors")]
    constants.HF_HUB_OFFLINE = True  # restored by pointed_at
    assert_same_scores(score(SHARDED), reference)
    assert not hub.bytes_sent.get("config.json") and not [
        k for k in hub.bytes_sent if k.endswith(".safetensors")
    ]


def test_a_source_closed_by_its_with_block_holds_no_reader_thread_and_reads_nothing(hub, repos):
    """``WeightSource`` as a context manager: a range reader's threads end with the block."""
    with open_source(SHARDED) as source:
        names = sorted(n for n in source.names if n.endswith("q_proj.weight"))
        assert all(source.get(name).numel() > 0 for name in names[:2])  # the second plans the rest
        assert any(t.name.startswith("attngeom-range") for t in threading.enumerate())
    assert not any(t.name.startswith("attngeom-range") for t in threading.enumerate())
    with pytest.raises(ValueError, match="after the source was closed"):
        source.get(names[0])


def test_the_ranged_table_is_what_huggingface_hub_reads_in_fewer_bytes(hub, repos):
    """``huggingface_hub.get_safetensors_metadata`` finds the same tensors (name, dtype, shape, offsets in
    the data) as the ranged reader's table, which it cannot replace: its offsets count from the end of a
    header whose length it does not return (a tensor's bytes cannot be asked for by range without it), it
    asks for 100,000 bytes of every file (all of a small one), and it keeps nothing for an offline re-run.
    The ranged reader parses the header bytes it fetched with huggingface_hub's own parser."""
    from huggingface_hub import HfApi

    from attngeom.sources.hub import Repo

    def asked(since: int) -> int:  # bytes of the ranged GETs answered since then (counted as they start)
        return sum(
            last - first + 1 for name, first, last in hub.ranges[since:] if name.endswith(".safetensors")
        )

    for repo_id in (SHARDED, SINGLE):
        before = len(hub.ranges)
        theirs = HfApi().get_safetensors_metadata(repo_id, revision=hub.commit)
        their_bytes, before = asked(before), len(hub.ranges)
        repo = Repo.resolve(repo_id, "config.json", None, None)
        for shard, metadata in theirs.files_metadata.items():
            file = repo.remote(shard)
            ranged.read_safetensors_table(file)
            data_start = len(ranged.verified(file.header_path))
            ours = {
                name: (e.dtype, list(e.shape), [e.start - data_start, e.end - data_start])
                for name, e in file.table.items()
            }
            assert ours == {
                name: (info.dtype, info.shape, list(info.data_offsets))
                for name, info in metadata.tensors.items()
            }
        headers = sum(safetensors_layout(repos[repo_id] / shard)[0] for shard in theirs.files_metadata)
        assert asked(before) == headers < their_bytes, (repo_id, headers, their_bytes)


def test_single_file_with_biases_merges_adjacent_ranges(hub, repos):
    reference = score(repos[SINGLE])
    frame = score(SINGLE)
    assert_same_scores(frame, reference)
    assert frame["n_params"].iloc[0] == reference["n_params"].iloc[0]
    header, sizes = safetensors_layout(repos[SINGLE] / "model.safetensors")
    wanted = [n for n in sizes if qk(n)]
    assert len(wanted) == 4 * 3  # q/k weight and bias of three layers
    assert hub.bytes_sent["model.safetensors"] == header + sum(sizes[n] for n in wanted)
    data_requests = [r for r in hub.ranges if r[1] >= header]
    # layer 0 is read as asked (4 requests); later layers' bias + weight pairs come in one request each
    assert len(data_requests) == 4 + 2 * 2


def test_gguf_header_and_qk_ranges(hub, repos):
    local = repos[GGUF] / GGUF_FILE
    reference = score(local)
    frame = score(f"{GGUF}/{GGUF_FILE}")
    assert_same_scores(frame, reference)
    assert set(frame["model_id"]) == {f"{GGUF}/{GGUF_FILE}"} and set(frame["revision"]) == {hub.commit}
    reader = gguf.GGUFReader(local)
    qk_tensors = [t for t in reader.tensors if ".attn_q." in t.name or ".attn_k." in t.name]
    data = sum(end - start + 1 for _, start, end in hub.ranges if start >= reader.data_offset)
    assert data == sum(int(t.n_bytes) for t in qk_tensors)
    assert hub.bytes_sent[GGUF_FILE] < 0.5 * local.stat().st_size
    # q and k of a layer lie back to back in GGUF: one request per layer after the first
    assert len([r for r in hub.ranges if r[1] >= reader.data_offset]) == 2 + 2
    hub.bytes_sent.clear()
    constants.HF_HUB_OFFLINE = True
    assert_same_scores(score(f"{GGUF}/{GGUF_FILE}"), reference)
    assert not hub.bytes_sent


@pytest.mark.slow
def test_real_gguf_smollm2(hub, repos, tmp_path):
    """The packaged SmolLM2-135M Q4_1 GGUF (98 MB, a 49k-token vocabulary in its header) over ranges."""
    path = packaged_model_path("SmolLM2-135M-Instruct-Q4_1")
    hub.repos["HuggingFaceTB/SmolLM2-GGUF"] = path.parent
    reference = score(path)
    frame = score(f"HuggingFaceTB/SmolLM2-GGUF/{path.name}")
    assert_same_scores(frame, reference)
    assert hub.bytes_sent[path.name] < 0.15 * path.stat().st_size


FAULTS = {
    "connection dropped mid-range": ["drop", "drop"],
    "503 twice": ["503", "503"],
    "truncated response": ["truncate", "truncate"],
    "all at once": ["drop", "503", "truncate", "503", "drop", "truncate", "drop"],
}


@pytest.mark.parametrize("faults", list(FAULTS))
def test_transient_faults_give_the_right_scores(hub, repos, tmp_path, faults):
    reference = score(repos[SINGLE])
    hub.faults["model.safetensors"].extend(FAULTS[faults])
    assert_same_scores(score(SINGLE), reference)
    assert not hub.faults["model.safetensors"], "every fault was served"
    _, sizes = safetensors_layout(repos[SINGLE] / "model.safetensors")
    assert not [p for p in cache_files(tmp_path) if ".tmp" in p.name]
    assert cached_tensors(tmp_path) == {n: sizes[n] for n in sizes if qk(n)}


def test_persistent_failure_is_clear_and_leaves_no_corrupt_entry(hub, repos, tmp_path):
    reference = score(repos[SINGLE])
    score(SINGLE)  # header and layer-0 tensors cached ...
    for path in cache_files(tmp_path):
        if path.name.startswith("layers.2."):
            path.unlink()  # ... all but the last layer's
    hub.faults["model.safetensors"].extend(["drop"] + ["503"] * 50)
    before = set(threading.enumerate())
    with pytest.raises(InputError, match=r"download failed after 5 tries \(HTTP 503\)"):
        score(SINGLE)
    # the error reaches the caller only once the source's range threads have ended: none writes on
    at_error = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("attngeom-range")]
    assert at_error == []
    _, sizes = safetensors_layout(repos[SINGLE] / "model.safetensors")
    assert not [p for p in cache_files(tmp_path) if ".tmp" in p.name]
    assert all(sizes[n] == size for n, size in cached_tensors(tmp_path).items())  # only whole tensors
    hub.faults.clear()
    assert_same_scores(score(SINGLE), reference)


def test_server_ignoring_ranges_is_named_and_full_download_still_works(hub, repos):
    hub.faults["model.safetensors"].append("ignore-range")
    with pytest.raises(InputError, match=r"ignores HTTP Range requests.*--full-download"):
        score(SINGLE)
    hub.faults["model.safetensors"].extend(["ignore-range"] * 3)
    assert_same_scores(score(SINGLE, full_download=True), score(repos[SINGLE]))


def test_forbidden_range_is_an_auth_error(hub):
    hub.faults["model.safetensors"].append("403")
    with pytest.raises(InputError, match=r"no access to model.safetensors \(HTTP 403.*request access"):
        score(SINGLE)


def test_gated_wrong_revision_wrong_id(hub, repos, monkeypatch):
    spec = f"{GGUF}/{GGUF_FILE}"
    hub.token = "secret"
    with pytest.raises(InputError, match="gated repository.*HF_TOKEN"):
        score(spec)
    monkeypatch.setenv("HF_TOKEN", "secret")
    assert_same_scores(score(spec), score(repos[GGUF] / GGUF_FILE))
    with pytest.raises(InputError, match="no revision 'v9'"):
        score(spec, revision="v9")
    with pytest.raises(InputError, match="no such repository"):
        score(f"org/nothing/{GGUF_FILE}")
    with pytest.raises(InputError, match="no file other.gguf"):
        score(f"{GGUF}/other.gguf")


def test_bin_checkpoint_falls_back_to_full_download_and_says_so(hub, repos, caplog):
    with caplog.at_level(logging.WARNING, logger="attngeom.sources.hub"):
        frame = score(BIN)
    assert "cannot be read in parts" in caplog.text
    assert_same_scores(frame, score(repos[BIN]))
    assert hub.bytes_sent["pytorch_model.bin"] == (repos[BIN] / "pytorch_model.bin").stat().st_size


def test_cli_full_download_flag(hub, repos, tmp_path):
    out = tmp_path / "scores.parquet"
    assert cli.main(["score", SINGLE, "-o", str(out), "--quiet", "--full-download"]) == 0
    size = (repos[SINGLE] / "model.safetensors").stat().st_size
    assert hub.bytes_sent["model.safetensors"] == size
    assert not hub.ranges
    assert torch.tensor(pd.read_parquet(out)["symmetry"].dropna().to_numpy()).isfinite().all()


def test_redirect_to_a_cdn_keeps_ranges_and_drops_the_token(repos, point, monkeypatch):
    """As on the Hub: weight files redirect to another origin, which must get the Range but not the token."""
    with HubServer(repos, token="secret", cdn=True).running() as server:
        point(server)
        monkeypatch.setenv("HF_TOKEN", "secret")
        assert_same_scores(score(SHARDED), score(repos[SHARDED]))
        assert_same_scores(score(f"{GGUF}/{GGUF_FILE}"), score(repos[GGUF] / GGUF_FILE))
        assert_same_scores(score(SINGLE, full_download=True), score(repos[SINGLE]))
        assert server.ranges and server.cdn_auth_seen == 0
        assert server.bytes_sent["model.safetensors"] == (repos[SINGLE] / "model.safetensors").stat().st_size


def test_offline_without_a_cached_copy_is_clear(hub):
    constants.HF_HUB_OFFLINE = True  # restored by pointed_at
    for full in (False, True):
        with pytest.raises(InputError, match="not in the local cache and the Hub cannot be reached"):
            score(f"{GGUF}/{GGUF_FILE}", full_download=full)
    assert not hub.requests
