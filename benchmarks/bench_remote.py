"""Hub scoring by HTTP range vs whole shards: bytes transferred and wall time, served from 127.0.0.1.

The synthetic Llama-3.2-1B-shaped checkpoint of ``bench_scoring.py`` (bf16, 5 shards, 2.45 GB; written
once to ``benchmarks/.cache``) is served by the tests' hub-like server. For each link (plain localhost,
and a simulated one: ``--rate`` MB/s shared by all connections, ``--latency`` ms per request) and each mode
(ranges, the default; whole shards, ``full_download=True``: huggingface_hub downloads every shard holding
q/k) it times reading all q/k tensors into memory from an empty cache, scoring end to end from an empty
cache, and scoring again with the cache filled. Bytes are counted by the server.

    python benchmarks/bench_remote.py                      # localhost and 200 MB/s, 30 ms
    python benchmarks/bench_remote.py --rate 50 --latency 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

from bench_scoring import CACHE, write_llama_1b  # noqa: E402
from hubserver import HubServer, pointed_at  # noqa: E402

import attngeom  # noqa: E402
from attngeom.architectures import architecture_for  # noqa: E402
from attngeom.sources import open_source  # noqa: E402

REPO = "synthetic/llama-3.2-1b-shaped"
MB = 1e6


def qk_bytes(path: Path) -> int:
    total = 0
    for shard in path.glob("*.safetensors"):
        with open(shard, "rb") as handle:
            header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
        for name, info in header.items():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                total += info["data_offsets"][1] - info["data_offsets"][0]
    return total


def load_qk(full: bool) -> int:
    """Open REPO and read every q/k tensor through the architecture map, without the score math."""
    source = open_source(REPO, full_download=full)
    config = source.config
    return sum(1 for _ in architecture_for(config).layers(config, source))


def timed(server: HubServer, home: Path, work) -> tuple[float, int]:
    """(wall seconds, bytes the server sent) of ``work()`` with huggingface_hub pointed at ``server``."""
    server.bytes_sent.clear()
    with pointed_at(server, home):
        start = time.perf_counter()
        work()
        wall = time.perf_counter() - start
    return wall, sum(server.bytes_sent.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="simulated link, MB/s (all connections)")
    parser.add_argument("--latency", type=float, default=30.0, help="simulated link, ms per request")
    args = parser.parse_args()
    path = write_llama_1b(CACHE / "llama-3.2-1b-shaped")
    repo = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    qk = qk_bytes(path)
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; repository {repo / MB:.0f} MB, ",
        end="",
    )
    print(f"q/k tensors {qk / MB:.1f} MB ({qk / repo:.1%})")
    print("load: open the source and read all q/k tensors (empty cache); score: attngeom.score end to end")
    header = f"{'link':<20} {'mode':<13} {'load s':>7} {'MB sent':>8} {'sent/qk':>8} {'sent/repo':>9}"
    print(header + f" {'score s':>8} {'rescore s':>9} {'MB resent':>9}")
    server = HubServer({REPO: path})
    for file in path.iterdir():
        server.etag(file)  # hash once now, not inside a timed run
    links = {"localhost": (0.0, None), f"{args.rate:g} MB/s, {args.latency:g} ms": (args.latency, args.rate)}
    with server.running():
        for link, (latency, rate) in links.items():
            server.latency, server.rate = latency / 1000, rate * MB if rate else None
            for mode, full in (("ranges", False), ("whole shards", True)):
                with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
                    load, sent = timed(server, Path(first), lambda full=full: load_qk(full))
                    scored, _ = timed(server, Path(second), lambda full=full: score(full))
                    again, resent = timed(server, Path(second), lambda full=full: score(full))
                print(
                    f"{link:<20} {mode:<13} {load:7.2f} {sent / MB:8.1f} {sent / qk:8.4f} {sent / repo:9.4f}"
                    f" {scored:8.2f} {again:9.2f} {resent / MB:9.3f}"
                )
    bench_gguf()
    return 0


def bench_gguf() -> None:
    """The packaged SmolLM2-135M Q4_1 GGUF: a 1.8 MB header (49k-token vocabulary) before its tensors."""
    import gguf

    from attngeom.packaged import packaged_model_path

    path = packaged_model_path("SmolLM2-135M-Instruct-Q4_1")
    reader = gguf.GGUFReader(path)
    qk = sum(int(t.n_bytes) for t in reader.tensors if ".attn_q." in t.name or ".attn_k." in t.name)
    size = path.stat().st_size
    spec = f"HuggingFaceTB/SmolLM2-GGUF/{path.name}"
    server = HubServer({"HuggingFaceTB/SmolLM2-GGUF": path.parent})
    server.etag(path)
    print(
        f"\nGGUF {path.name}: {size / MB:.1f} MB, header {reader.data_offset / MB:.2f} MB, q/k {qk / MB:.2f} MB"
    )
    with server.running(), tempfile.TemporaryDirectory() as home:
        load, sent = timed(server, Path(home), lambda: attngeom.score(spec, progress=False))
    print(
        f"ranges, localhost: score {load:.2f} s, {sent / MB:.2f} MB sent = {sent / qk:.3f} × q/k = {sent / size:.3f} × file"
    )


def score(full: bool) -> None:
    frame = attngeom.score(REPO, progress=False, full_download=full)
    if len(frame) != 16 * 33:
        raise SystemExit(f"expected {16 * 33} rows, got {len(frame)}")


if __name__ == "__main__":
    sys.exit(main())
