"""Factored vs dense scoring: wall time and peak memory on a Llama-3.1-405B-shaped layer and a ~1B model.

Part ``layer``: one synthetic attention layer shaped like Llama-3.1-405B (d = 16384, 128 query heads,
8 kv heads, head_dim 128). The factored method (``attngeom.scores``) is compared with forming each
d × d matrix and scoring it with ``score_dense``. Every measurement runs in its own child process, so
its peak RSS (``ru_maxrss`` from ``os.wait4``) sees every torch allocation and nothing else's.

Part ``model``: a synthetic Llama-3.2-1B-shaped checkpoint (bf16, sharded safetensors + index +
config.json) is written once to ``benchmarks/.cache`` shard by shard, then ``attngeom score`` scores it
in a child process; its wall time and peak RSS are reported.

Part ``devices``: the same checkpoint scored with ``--device cpu`` and ``--device cuda`` in turn, each a
fresh ``attngeom score DIR --quiet`` process (interpreter start included) on all cores, ``--repeat``
times; prints the median wall time of each side by side and checks that both give the same numbers.
cuda is skipped, saying so, where no CUDA device is available.

    python benchmarks/bench_scoring.py                  # parts layer and model, float32 and float64, 1 thread
    python benchmarks/bench_scoring.py --part layer --dtype float32 --dense-heads 2 --threads 2
    python benchmarks/bench_scoring.py --part devices --repeat 5       # cpu vs cuda, float64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

CACHE = Path(__file__).resolve().parent / ".cache"
GB = 1e9

# Llama-3.1-405B attention shapes.
D, N_HEADS, N_KV_HEADS, HEAD_DIM = 16384, 128, 8, 128

# Llama-3.2-1B shapes.
LLAMA_1B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128001,
}
LAYERS_PER_SHARD = 4


# --- child side: one measurement, weights built in-process, result as one JSON line ------------------------------


def layer_weights(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """W_q (d × H·d_h) and W_k (d × H_kv·d_h) in the x W convention, Llama-like init scale."""
    gen = torch.Generator().manual_seed(0)
    w_q = torch.randn(D, N_HEADS * HEAD_DIM, generator=gen, dtype=dtype).mul_(0.02)
    w_k = torch.randn(D, N_KV_HEADS * HEAD_DIM, generator=gen, dtype=dtype).mul_(0.02)
    return w_q, w_k


def summed_queries(w_q: torch.Tensor) -> torch.Tensor:
    """P: the query heads that share a kv head summed, so that Σ_h W_q,h W_k,g(h)ᵀ = P W_kᵀ."""
    group = N_HEADS // N_KV_HEADS
    heads = w_q.reshape(D, N_KV_HEADS, group, HEAD_DIM).sum(dim=2)
    return heads.reshape(D, N_KV_HEADS * HEAD_DIM)


def clock() -> tuple[float, float]:
    """(wall, CPU) seconds: CPU time is what the box being shared with other jobs disturbs least."""
    return time.perf_counter(), time.process_time()


def measure(kind: str, dtype: torch.dtype, dense_heads: int) -> dict:
    """Run one method on the 405B-shaped layer; returns wall and CPU seconds and scores to cross-check."""
    from attngeom.scores import score_dense, score_factors, score_layer, split_heads

    w_q, w_k = layer_weights(dtype)
    group = N_HEADS // N_KV_HEADS
    setup_rss = max_rss_self()
    heads_timed = N_HEADS
    scores: dict[str, float] = {}
    start = clock()
    if kind == "factored-layer+heads":
        per_head, per_layer = score_layer(w_q, w_k, N_HEADS, N_KV_HEADS, HEAD_DIM)
        scores = {"head0": per_head.symmetry[0].item(), "layer": per_layer.symmetry.item()}
    elif kind == "factored-heads":
        q_heads, k_heads = split_heads(w_q, N_HEADS, HEAD_DIM), split_heads(w_k, N_KV_HEADS, HEAD_DIM)
        scores = {"head0": score_factors(q_heads, k_heads.repeat_interleave(group, dim=0)).symmetry[0].item()}
    elif kind == "factored-layer":
        scores = {"layer": score_factors(summed_queries(w_q), w_k).symmetry.item()}
    elif kind == "dense-heads":
        heads_timed = dense_heads
        for h in range(dense_heads):
            g = h // group
            m = w_q[:, h * HEAD_DIM : (h + 1) * HEAD_DIM] @ w_k[:, g * HEAD_DIM : (g + 1) * HEAD_DIM].T
            scores.setdefault("head0", score_dense(m).symmetry.item())
            del m
    elif kind == "dense-layer-gqa":
        m = summed_queries(w_q) @ w_k.T  # the cheapest way to form M: inner dimension H_kv·d_h
        scores = {"layer": score_dense(m).symmetry.item()}
    elif kind == "dense-layer-naive":
        # M = Σ_h W_q,h W_k,g(h)ᵀ head by head (the same work as W_q @ [W_k repeated per head]ᵀ);
        # the accumulation is timed over a few heads and extrapolated, the final score_dense is timed.
        heads_timed = dense_heads
        m = torch.zeros(D, D, dtype=dtype)
        for h in range(dense_heads):
            g = h // group
            m.addmm_(w_q[:, h * HEAD_DIM : (h + 1) * HEAD_DIM], w_k[:, g * HEAD_DIM : (g + 1) * HEAD_DIM].T)
        accumulated = clock()
        score_dense(m)
        end = clock()
        wall, cpu = (
            (a - s) * N_HEADS / dense_heads + (e - a) for s, a, e in zip(start, accumulated, end, strict=True)
        )
        return {"wall": wall, "cpu": cpu, "heads_timed": heads_timed, "setup_rss": setup_rss, "scores": {}}
    else:
        raise ValueError(f"unknown measurement {kind!r}")
    wall, cpu = ((e - s) * N_HEADS / heads_timed for s, e in zip(start, clock(), strict=True))
    return {"wall": wall, "cpu": cpu, "heads_timed": heads_timed, "setup_rss": setup_rss, "scores": scores}


def max_rss_self() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --- parent side --------------------------------------------------------------------------------------------------


def run_child(argv: list[str], threads: int | None) -> tuple[float, float, int, str]:
    """Run argv; return (wall s, CPU s, peak RSS bytes) of that child alone, and its stdout. Raises on failure.

    ``threads``: OpenMP/MKL threads of the child; None leaves torch's default (every core).
    """
    env = dict(os.environ)
    if threads is not None:
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, unlike RUSAGE_CHILDREN
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{stderr.read()[-2000:]}")
        return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, stdout.read()


def bench_layer(dtypes: list[str], dense_heads: int, threads: int) -> None:
    kinds = [
        ("factored-heads", "factored", "per head"),
        ("dense-heads", "dense", "per head"),
        ("factored-layer", "factored", "per layer"),
        ("dense-layer-gqa", "dense, M = P Kᵀ", "per layer"),
        ("dense-layer-naive", "dense, Σ_h M_h", "per layer"),
        ("factored-layer+heads", "score_layer", "both"),
    ]
    print(
        f"\n(a) one Llama-3.1-405B-shaped layer: d={D}, H={N_HEADS}, H_kv={N_KV_HEADS}, d_h={HEAD_DIM}, CPU,"
    )
    print(f"    {threads} thread(s), each row its own child process; 'base' = RSS once W_q, W_k are built")
    header = f"{'method':<18} {'scores':<10} {'dtype':<8} {'wall s':>8} {'CPU s':>8} {'peak RSS GB':>12} {'base GB':>8}"
    print(header + "  note")
    print("-" * (len(header) + 6))
    for dtype in dtypes:
        cpu: dict[str, float] = {}
        scores: dict[str, dict[str, float]] = {}
        for kind, method, scope in kinds:
            argv = [sys.executable, __file__, "--measure", kind, "--dtype", dtype]
            argv += ["--dense-heads", str(dense_heads)]
            _, _, peak, out = run_child(argv, threads)
            result = json.loads(out.strip().splitlines()[-1])
            cpu[kind], scores[kind] = result["cpu"], result["scores"]
            note = ""
            if result["heads_timed"] < N_HEADS:
                note = (
                    f"extrapolated ×{N_HEADS / result['heads_timed']:.0f} from {result['heads_timed']} heads"
                )
            print(
                f"{method:<18} {scope:<10} {dtype:<8} {result['wall']:8.1f} {result['cpu']:8.1f} "
                f"{peak / GB:12.2f} {result['setup_rss'] / GB:8.2f}  {note}"
            )
        head_diff = abs(scores["factored-heads"]["head0"] - scores["dense-heads"]["head0"])
        layer_diff = abs(scores["factored-layer"]["layer"] - scores["dense-layer-gqa"]["layer"])
        print(f"  |factored − dense| symmetry: head 0 {head_diff:.1e}, layer {layer_diff:.1e}")
        ratio = {
            "per head": cpu["dense-heads"] / cpu["factored-heads"],
            "per head vs forming the M_h alone": cpu["dense-layer-naive"] / cpu["factored-heads"],
            "per layer vs M = P Kᵀ": cpu["dense-layer-gqa"] / cpu["factored-layer"],
            "per layer vs Σ_h M_h": cpu["dense-layer-naive"] / cpu["factored-layer"],
            "whole layer (dense per head + P Kᵀ vs score_layer)": (
                cpu["dense-heads"] + cpu["dense-layer-gqa"]
            )
            / cpu["factored-layer+heads"],
        }
        print(f"  speed-up of factored over dense in CPU time, {dtype} (target ≥ 20×):")
        for name, value in ratio.items():
            print(f"    {name:<52} {value:7.1f}×  {'meets' if value >= 20 else 'misses'} target")


def write_llama_1b(path: Path) -> Path:
    """Write the synthetic bf16 checkpoint shard by shard (one shard in memory at a time); reuse if complete."""
    from safetensors.torch import save_file

    if (path / "config.json").exists():  # written last: its presence means the checkpoint is complete
        return path
    path.mkdir(parents=True, exist_ok=True)
    c = LLAMA_1B
    d, inter, n_layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    kv = c["num_key_value_heads"] * c["head_dim"]
    gen = torch.Generator().manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.bfloat16).mul_(0.02)

    shards: list[Callable[[], dict[str, torch.Tensor]]] = [
        lambda: {"model.embed_tokens.weight": randn(c["vocab_size"], d), "model.norm.weight": torch.ones(d)},
    ]
    for first in range(0, n_layers, LAYERS_PER_SHARD):

        def layers(first: int = first) -> dict[str, torch.Tensor]:
            tensors = {}
            for i in range(first, min(first + LAYERS_PER_SHARD, n_layers)):
                p = f"model.layers.{i}."
                tensors |= {
                    p + "self_attn.q_proj.weight": randn(d, d),
                    p + "self_attn.k_proj.weight": randn(kv, d),
                    p + "self_attn.v_proj.weight": randn(kv, d),
                    p + "self_attn.o_proj.weight": randn(d, d),
                    p + "mlp.gate_proj.weight": randn(inter, d),
                    p + "mlp.up_proj.weight": randn(inter, d),
                    p + "mlp.down_proj.weight": randn(d, inter),
                    p + "input_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
                    p + "post_attention_layernorm.weight": torch.ones(d, dtype=torch.bfloat16),
                }
            return tensors

        shards.append(layers)
    weight_map, total_size = {}, 0
    for i, make in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {k: v.to(torch.bfloat16) for k, v in make().items()}
        save_file(tensors, path / (name + ".tmp"), metadata={"format": "pt"})
        os.replace(path / (name + ".tmp"), path / name)
        weight_map |= dict.fromkeys(tensors, name)
        total_size += sum(t.numel() * t.element_size() for t in tensors.values())
        del tensors
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (path / "config.json.tmp").write_text(json.dumps(c, indent=2))
    os.replace(path / "config.json.tmp", path / "config.json")
    return path


def bench_model(dtypes: list[str], threads: int) -> None:
    import pandas as pd

    path = CACHE / "llama-3.2-1b-shaped"
    start = time.perf_counter()
    fresh = not (path / "config.json").exists()
    write_llama_1b(path)
    size = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    c = LLAMA_1B
    print(
        f"\n(b) synthetic Llama-3.2-1B-shaped checkpoint, bf16, {size / GB:.2f} GB in {path.name}/ ", end=""
    )
    print(f"({'written in %.0f s' % (time.perf_counter() - start) if fresh else 'reused'})")
    print(f"    `attngeom score` in a child process, {threads} thread(s); target peak RSS < 1.5 GB")
    header = f"{'dtype':<8} {'wall s':>8} {'CPU s':>8} {'peak RSS GB':>12} {'rows':>6}  check"
    print(header)
    print("-" * len(header))
    executable = Path(sys.executable).with_name("attngeom")
    expected_rows = c["num_hidden_layers"] * (c["num_attention_heads"] + 1)
    for dtype in dtypes:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "scores.parquet"
            argv = [str(executable), "score", str(path), "-o", str(out), "--dtype", dtype, "--quiet"]
            wall, cpu, peak, _ = run_child(argv, threads)
            rows = len(pd.read_parquet(out))
        check = "ok" if rows == expected_rows else f"expected {expected_rows} rows"
        print(f"{dtype:<8} {wall:8.1f} {cpu:8.1f} {peak / GB:12.2f} {rows:6d}  {check}")


def bench_devices(dtype: str, repeat: int) -> None:
    import pandas as pd

    path = write_llama_1b(CACHE / "llama-3.2-1b-shaped")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    gpu = f", {torch.cuda.get_device_name()}" if "cuda" in devices else ""
    print(f"\n(c) `attngeom score {path.name} --quiet --device D --dtype {dtype}`, every core{gpu};")
    print(f"    a fresh process each run (interpreter start included), devices in turn, {repeat} runs each")
    runs: dict[str, list[tuple[float, float, int]]] = {device: [] for device in devices}
    scores: dict[str, pd.DataFrame] = {}
    executable = Path(sys.executable).with_name("attngeom")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            for device in devices:
                out = Path(tmp) / f"{device}.parquet"
                argv = [str(executable), "score", str(path), "-o", str(out), "--quiet", "--device", device]
                wall, cpu, peak, _ = run_child([*argv, "--dtype", dtype], threads=None)
                runs[device].append((wall, cpu, peak))
                scores[device] = pd.read_parquet(out)
    header = (
        f"{'device':<8} {'wall s median':>14} {'min':>7} {'max':>7} {'CPU s median':>13} {'peak RSS GB':>12}"
    )
    print(header)
    print("-" * len(header))
    for device, measured in runs.items():
        walls = [w for w, _, _ in measured]
        cpu = statistics.median(c for _, c, _ in measured)
        peak = max(p for _, _, p in measured)
        print(
            f"{device:<8} {statistics.median(walls):14.2f} {min(walls):7.2f} {max(walls):7.2f} "
            f"{cpu:13.2f} {peak / GB:12.2f}"
        )
    if "cuda" not in runs:
        print("cuda     skipped: no CUDA device is available here")
        return
    ratio = statistics.median(w for w, _, _ in runs["cuda"]) / statistics.median(w for w, _, _ in runs["cpu"])
    diff = max(
        ((scores["cuda"][c] - scores["cpu"][c]).abs() / scores["cpu"][c].abs().clip(lower=1e-300)).max()
        for c in ("symmetry", "norm")
    )
    print(f"cuda / cpu wall: {ratio:.2f}; largest relative difference of symmetry and norm: {diff:.1e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["layer", "model", "devices", "all"], default="all")
    parser.add_argument("--dtype", choices=["float32", "float64"], action="append", help="repeatable")
    parser.add_argument("--dense-heads", type=int, default=2, help="heads timed by the dense per-head path")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads in each child (the box is shared)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per device in part devices")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # child mode: one measurement of part (a)
    args = parser.parse_args()
    dtypes = args.dtype or ["float32", "float64"]
    if args.measure:
        print(json.dumps(measure(args.measure, getattr(torch, dtypes[0]), args.dense_heads)))
        return 0
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    if args.part in ("layer", "all"):
        bench_layer(dtypes, args.dense_heads, args.threads)
    if args.part in ("model", "all"):
        bench_model(dtypes, args.threads)
    if args.part == "devices":
        bench_devices(dtypes[0] if args.dtype else "float64", args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
