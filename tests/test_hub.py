"""Hub ids through huggingface_hub against a local hub-like server: only config, index and q/k shards move."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conformance import build, tiny_config
from hubserver import HubServer

from attngeom.records import read_scores

REPO = "tiny-org/tiny-llama"


@pytest.fixture(scope="module")
def sharded_llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("repo")
    config = tiny_config(
        "llama",
        hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=256,
        vocab_size=64,
    )
    build(config).save_pretrained(path, max_shard_size="40KB")
    return path


def score_via_hub(server, tmp_path, *extra, env=None):
    out = tmp_path / "hub.parquet"
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),  # the checkout under test, where it is not installed
        "HF_ENDPOINT": server.url,
        "HF_HOME": str(tmp_path / "hf"),
        "ATTNGEOM_CACHE": str(tmp_path / "cache"),
        "HF_HUB_DISABLE_XET": "1",
        **(env or {}),
    }
    result = subprocess.run(
        [sys.executable, "-m", "attngeom.cli", "score", REPO, "-o", str(out), "--quiet", *extra],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
    )
    return result, out


def test_downloads_only_the_shards_holding_qk(sharded_llama, tmp_path):
    weight_map = json.loads((sharded_llama / "model.safetensors.index.json").read_text())["weight_map"]
    needed = {weight_map[k] for k in weight_map if k.endswith(("q_proj.weight", "k_proj.weight"))}
    assert len(needed) < len(set(weight_map.values())), "the fixture must have shards without q/k"
    with HubServer({REPO: sharded_llama}).running() as server:
        result, out = score_via_hub(server, tmp_path)
        assert result.returncode == 0, result.stderr
        fetched = {name for name in server.bytes_sent if name.endswith(".safetensors")}
        assert fetched == needed
        assert set(server.bytes_sent) - fetched == {"config.json", "model.safetensors.index.json"}
        frame = read_scores(out)
        assert set(frame["revision"]) == {server.commit}
        on_disk = subprocess.run(
            [
                sys.executable,
                "-m",
                "attngeom.cli",
                "score",
                str(sharded_llama),
                "-o",
                str(tmp_path / "d.parquet"),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        assert on_disk.returncode == 0
        local = read_scores(tmp_path / "d.parquet")
        assert frame["file_hash"].iloc[0] == local["file_hash"].iloc[0]  # the same bytes were read
        # ... and scored alike; float64 sums over differently aligned copies may differ in the last bit
        assert np.allclose(frame["symmetry"], local["symmetry"], rtol=0, atol=1e-12, equal_nan=True)
        # a second run offline is served from the HF_HOME cache
        server.bytes_sent.clear()
        result, _ = score_via_hub(server, tmp_path, env={"HF_HUB_OFFLINE": "1"})
        assert result.returncode == 0, result.stderr
        assert not server.bytes_sent


def test_token_and_revision(sharded_llama, tmp_path):
    with HubServer({REPO: sharded_llama}, token="secret").running() as server:
        result, out = score_via_hub(server, tmp_path)
        assert result.returncode == 2 and "HF_TOKEN" in result.stderr.strip().splitlines()[-1]
        assert not out.exists()
        result, out = score_via_hub(server, tmp_path, env={"HF_TOKEN": "secret"})
        assert result.returncode == 0, result.stderr
        result, _ = score_via_hub(server, tmp_path, "--revision", "v9", env={"HF_TOKEN": "secret"})
        assert result.returncode == 2 and "no revision 'v9'" in result.stderr


def test_file_hash_does_not_depend_on_where_the_files_lie(sharded_llama, tmp_path):
    import shutil

    import attngeom

    copy = tmp_path / "elsewhere"
    shutil.copytree(sharded_llama, copy)
    first = attngeom.score(sharded_llama, progress=False)["file_hash"].iloc[0]
    assert attngeom.score(copy, progress=False)["file_hash"].iloc[0] == first
