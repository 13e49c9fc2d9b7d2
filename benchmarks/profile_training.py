"""Where a training update's time goes: the step ``attngeom train`` runs on ``config/paper.yaml``'s training
defaults, under torch.profiler.

The update is built as the CLI builds it (``loop.train``: ``runtime_for``, ``rows_per_pass``,
``DocumentBatches``, ``build_model``, ``make_optimizer``, ``TrainStep``, ``feed_updates``), on the offline
corpus of ``paper_setting.corpus_settings`` (``bench_training.py prepare`` writes it). After ``--warmup``
updates (compilation, CUDA graphs), ``--updates`` updates are timed without the profiler (tokens/s, and the
host's time an update: waiting for the feed, and in the step's call), then as many again under it: device
time per update by category and the top kernels. On the CPU (a smoke test of the code, ``--device cpu``)
the table holds the CPU time of each operator instead.

Issue 40's "the update in one graph" is the setting ``update_graph`` (clip + AdamW recorded once as a CUDA
graph and replayed, ``step.CapturedUpdate``: on by default on one GPU; ``--set update_graph=false``, the
eager clip and fused AdamW); ``--update-graph fused`` runs another candidate in place of the step's update:
the two compiled without a graph. The losses of every update are written with the figures, so two calls compare both speed
and numbers. ``--host-profile`` then runs as many updates again under cProfile: where the host's time goes.

    python benchmarks/profile_training.py                                   # BERT-mini, SDPA, on CUDA
    python benchmarks/profile_training.py --layers 12                       # BERT-base (hidden 768)
    python benchmarks/profile_training.py --out prof.json
    python benchmarks/profile_training.py --set update_graph=false  # clip + AdamW eager, not as a graph
    python benchmarks/profile_training.py --update-graph fused     # the two compiled, without a graph
    python benchmarks/profile_training.py --host-profile host.prof  # then where the host's time goes (cProfile)
    python benchmarks/profile_training.py --trace trace.json  # the trace; where the GPU sits idle (device_gaps)
    python benchmarks/profile_training.py --device cpu --warmup 1 --updates 1 \\
        --set hidden_size=32 --set n_heads=4 --set intermediate_size=64 --set seq_len=64
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import pstats
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import device_gaps
import pandas as pd
import torch
from paper_setting import CACHE, corpus_settings, paper_defaults

from attngeom.training.batch import Update
from attngeom.training.config import TrainConfig, make_config, parse_overrides
from attngeom.training.corpus import load_corpus
from attngeom.training.document_batches import DocumentBatches
from attngeom.training.loop import Runtime, learning_rate, make_optimizer, runtime_for, updates_ahead
from attngeom.training.memory import rows_per_pass
from attngeom.training.model import VOCABULARY_MULTIPLE, build_model
from attngeom.training.step import TrainStep, clip_and_step
from attngeom.training.stream_batches import PackedBatches

CATEGORIES = (
    ("attention kernels", ("flash", "fmha", "attention", "attn", "sdpa", "flex", "cudnn")),
    ("cross-entropy / softmax of the head", ("nll_loss", "log_softmax", "cross_entropy", "logsumexp")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "clip_grad", "_amp_")),
    ("matrix products", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "matmul", "addmm", "aten::mm", "bmm")),
    (
        "elementwise / normalisation",
        ("triton", "elementwise", "vectorized", "reduce", "norm", "gelu", "dropout", "add", "mul", "where"),
    ),
    ("copies / data", ("memcpy", "memset", "copy", "aten::to", "aten::cat", "gather", "scatter", "index")),
)
"""Category of a kernel (or, on the CPU, an operator) by the first rule whose words its name contains: a
compiled (Triton) kernel that fuses a copy into its arithmetic (``triton_red_fused__to_copy_…_dropout_…``) is
elementwise work, not a copy."""
OTHER = "other"
TOP = 15

DENSE_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4}
"""Datasheet dense bf16 tensor-core peak of an SXM card, by the name's model: the yardstick of ``rates``."""


def update_flops(config: TrainConfig, rows: int, slots: int, vocab: int) -> dict[str, float]:
    """Floating-point operations of one update's forward and backward passes, counted from its shapes:
    ``rows`` rows of ``seq_len`` (padding included: the kernels compute it) and ``slots`` loss slots.
    Matrix products: 2 × 3 (forward, two gradients) × tokens × each layer's q, k, v, output and two FFN
    matrices, plus the head's transform and decoder at the loss slots. Attention: 4 d_h flops a query × key
    pair a head forward (QKᵀ and PV), 10 backward (the scores recomputed, four gradients' products), over
    every pair of each row, as the dense kernel computes them."""
    d, inner, length = config.hidden, config.intermediate, config.seq_len
    tokens = rows * length
    vocab += -vocab % VOCABULARY_MULTIPLE
    matrices = 6 * tokens * config.n_layers * (4 * d * d + 2 * d * inner) + 6 * slots * (d * d + d * vocab)
    head_dim = d // config.heads
    attention = 14 * head_dim * config.heads * config.n_layers * rows * length * length
    return {"matrix products": float(matrices), "attention kernels": float(attention)}


def category(name: str) -> str:
    low = name.lower()
    return next((kind for kind, words in CATEGORIES if any(w in low for w in words)), OTHER)


def settings(args: argparse.Namespace) -> TrainConfig:
    """``config/paper.yaml``'s training defaults, the benchmark corpus, then this command's choices."""
    chosen = [*corpus_settings(args.cache), f"n_layers={args.layers}"]
    if args.hidden:
        chosen += [
            f"hidden_size={args.hidden}",
            f"n_heads={args.hidden // 64}",
            f"intermediate_size={4 * args.hidden}",
        ]
    if args.device:
        chosen.append(f"device={args.device}")
    if args.update_graph:  # the candidate takes the update's place: the step records none of its own
        chosen.append("update_graph=false")
    return make_config(paper_defaults(), parse_overrides([*chosen, *args.set]))


def updates(config: TrainConfig, rt: Runtime, vocab_size: int, corpus) -> Iterator[Update]:
    """The run's updates, built ahead and fed as ``loop.train`` feeds them, from step 0 on."""
    if config.batch_documents:
        rows = rows_per_pass(config, rt.device, vocab_size, verbose=True)
        batches: DocumentBatches | PackedBatches = DocumentBatches(corpus, config, rows)
    else:
        batches = PackedBatches(corpus, config)
    return updates_ahead(batches, config, range(config.steps), rt)


def compiled_update(step: TrainStep, config: TrainConfig, device: torch.device) -> Callable[[], torch.Tensor]:
    """The candidate ``fused``: ``step``'s optimizer swapped for an AdamW of the same groups and settings
    (``foreach``, capturable on CUDA, the rate a device tensor that ``set_learning_rate`` fills), and clip +
    step compiled as one function where the step compiles its loss (inductor's kernels, no CUDA graph of its
    own); the norm before clipping, as ``apply_update``. (Its ``reduce-overhead`` form, a CUDA graph of
    torch's graph trees, stopped on the H200 with torch 2.11: ``results/update_graph_h200/``.)"""
    cuda = device.type == "cuda"
    groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in step.optimizer.param_groups]
    lr = torch.tensor(config.lr, device=device) if cuda else config.lr
    step.optimizer = torch.optim.AdamW(groups, lr=lr, foreach=True, capturable=cuda)
    params = [p for g in groups for p in g["params"]]
    limit = config.grad_clip or math.inf

    def clip_and_step_all() -> torch.Tensor:
        return clip_and_step(params, step.optimizer, limit)

    if config.compiles_on(device.type):
        clip_and_step_all = torch.compile(clip_and_step_all)

    def update() -> torch.Tensor:
        norm = clip_and_step_all()
        step.optimizer.zero_grad(set_to_none=True)
        return norm

    return update


def host_functions(stats: pstats.Stats, updates: int, key: str) -> list[dict]:
    """The ``TOP`` functions by the host's time per update, ``key`` ``own_ms`` (in the function itself) or
    ``cumulative_ms`` (with its callees). cProfile slows Python down, so these say where the host's time
    goes, not how long it takes without the profiler."""
    rows = [
        {
            "function": f"{name} ({Path(file).name}:{line})",
            "own_ms": 1e3 * own / updates,
            "cumulative_ms": 1e3 * cumulative / updates,
            "calls": calls / updates,
        }
        for (file, line, name), (_, calls, own, cumulative, _) in stats.stats.items()
    ]
    return sorted(rows, key=lambda row: row[key], reverse=True)[:TOP]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_times(prof, device: torch.device) -> pd.DataFrame:
    """Milliseconds and calls per kernel (on a GPU) or per operator's own CPU time (on the CPU)."""
    if device.type == "cuda":
        rows: dict[str, list[float]] = {}
        for event in prof.events():
            annotation = getattr(event, "is_user_annotation", False) or "#" in event.name
            if event.device_type == torch.autograd.DeviceType.CUDA and not annotation:
                total = rows.setdefault(event.name, [0.0, 0])
                total[0] += event.time_range.elapsed_us() / 1e3
                total[1] += 1
        table = pd.DataFrame.from_dict(rows, orient="index", columns=["ms", "calls"])
    else:
        table = pd.DataFrame(
            {
                "ms": [e.self_cpu_time_total / 1e3 for e in prof.key_averages()],
                "calls": [e.count for e in prof.key_averages()],
            },
            index=[e.key for e in prof.key_averages()],
        )
        table = table[table.index.str.startswith("aten::")]
    return table.sort_values("ms", ascending=False)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--layers", type=int, default=4, help="4: BERT-mini, 12: BERT-base (their preset sizes)"
    )
    parser.add_argument(
        "--hidden", type=int, help="hidden size (heads of 64, intermediate 4×); default: the preset"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), help="default: config/paper.yaml's (cuda)")
    parser.add_argument("--warmup", type=int, default=30, help="updates before timing (compilation, graphs)")
    parser.add_argument("--updates", type=int, default=20, help="updates timed, then as many profiled")
    parser.add_argument("--cache", type=Path, default=CACHE, help="the corpus of bench_training.py prepare")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="more settings")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument(
        "--update-graph",
        choices=("fused",),
        help="a candidate: clip + AdamW compiled without a CUDA graph",
    )
    parser.add_argument(
        "--host-profile",
        type=Path,
        metavar="FILE",
        help="then as many updates again under cProfile: the host's time by function, its stats to FILE",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="write the profiled updates' Chrome trace to FILE; on a GPU, then where the device sat idle",
    )
    args = parser.parse_args(argv)

    config = settings(args)
    rt = runtime_for(config)
    config = config.for_device(rt.device.type)  # attention: auto, as loop.train makes it concrete
    corpus = load_corpus(config, progress=False)
    torch.manual_seed(config.seed)
    model = build_model(config, corpus.vocab_size).to(rt.device).train()
    train_step = TrainStep(model, make_optimizer(model, config, rt.device), config, rt.device, rt.autocast)
    if args.update_graph:
        train_step.apply_update = compiled_update(train_step, config, rt.device)
    feed_ = updates(config, rt, corpus.vocab_size, corpus)
    done = 0

    host: list[tuple[float, float]] = []
    losses: list[torch.Tensor] = []
    shapes: list[tuple[int, int]] = []  # each update's rows and loss slots, over its passes

    def run(count: int) -> int:
        """``count`` updates; the tokens they trained on. ``host`` gets each update's host seconds: waiting
        for the feed, and in the step's call (which returns once its kernels are queued)."""
        nonlocal done
        tokens = 0
        for _ in range(count):
            begin = time.perf_counter()
            update = next(feed_)
            fed = time.perf_counter()
            shapes.append(
                (
                    sum(len(b.input_ids) for b in update.micro_batches),
                    sum(b.targets.numel() for b in update.micro_batches),
                )
            )
            losses.append(train_step(update.micro_batches, learning_rate(config, done)).loss)
            host.append((fed - begin, time.perf_counter() - fed))
            tokens += update.tokens
            done += 1
        synchronize(rt.device)
        return tokens

    run(args.warmup)
    host.clear()
    start = time.perf_counter()
    tokens = run(args.updates)
    seconds = time.perf_counter() - start
    feed_wait_ms, step_call_ms = (1e3 * statistics.median(times) for times in zip(*host, strict=True))
    activities = [torch.profiler.ProfilerActivity.CPU]
    if rt.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    shapes.clear()
    with torch.profiler.profile(activities=activities) as prof:
        run(args.updates)
    idle: dict = {}
    if args.trace:
        prof.export_chrome_trace(str(args.trace))
        if rt.device.type == "cuda":
            idle = device_gaps.report(args.trace, args.updates)
    rows, slots = (statistics.mean(column) for column in zip(*shapes, strict=True))
    flops = update_flops(config, rows, slots, corpus.vocab_size)
    host_top: dict[str, list[dict]] = {}
    if args.host_profile:
        with cProfile.Profile() as hp:
            run(args.updates)
        hp.dump_stats(args.host_profile)
        host_top = {
            key: host_functions(pstats.Stats(hp), args.updates, key) for key in ("own_ms", "cumulative_ms")
        }
    feed_.close()

    per_update = device_times(prof, rt.device)
    per_update["ms"] /= args.updates
    per_update["calls"] /= args.updates
    kinds = per_update.groupby(per_update.index.map(category))["ms"].sum().sort_values(ascending=False)
    where = torch.cuda.get_device_name(rt.device) if rt.device.type == "cuda" else "cpu"
    print(
        f"\n{config.n_layers} layers, hidden {config.hidden}, attention {config.attention}, {where}"
        f"{f', update compiled: {args.update_graph} (candidate)' if args.update_graph else ''}: "
        f"{tokens / seconds:,.0f} tokens/s ({1e3 * seconds / args.updates:.1f} ms an update, "
        f"{tokens / args.updates:,.0f} tokens an update, {args.updates} updates after {args.warmup})"
    )
    print(
        f"host, median an update: {feed_wait_ms:.2f} ms waiting for the feed, {step_call_ms:.2f} ms in the step"
    )
    time_kind = "device" if rt.device.type == "cuda" else "CPU (operators' own)"
    print(f"\n{time_kind} time per update, by category (ms, share):")
    for kind, ms in kinds.items():
        print(f"  {kind:<38} {ms:9.3f}  {ms / kinds.sum():6.1%}")
    print(f"  {'total':<38} {kinds.sum():9.3f}")
    peak = next((tf for model, tf in DENSE_BF16_TFLOPS.items() if model in where), None)
    rates = {kind: flops[kind] / (kinds[kind] * 1e9) for kind in flops if kinds.get(kind, 0) > 0}
    print(
        f"\narithmetic rate, from the shapes ({rows:.1f} rows of {config.seq_len}, {slots:,.0f} loss slots an update):"
    )
    for kind, tflops in rates.items():
        versus = f", {tflops / peak:6.1%} of the card's dense bf16 peak ({peak} TFLOP/s)" if peak else ""
        print(
            f"  {kind:<38} {flops[kind] / 1e12:7.3f} TFLOP in {kinds[kind]:7.3f} ms: {tflops:6.1f} TFLOP/s{versus}"
        )
    print(f"\ntop {TOP} kernels (ms and calls per update):")
    for name, row in per_update.head(TOP).iterrows():
        print(f"  {row.ms:9.3f} {row.calls:6.1f}  {category(name):<12.12}  {name[:110]}")
    for key, rows in host_top.items():
        print(
            f"\nhost under cProfile, top {TOP} functions by {key} (ms own, ms with callees, calls; per update):"
        )
        for row in rows:
            print(
                f"  {row['own_ms']:8.3f} {row['cumulative_ms']:8.3f} {row['calls']:7.1f}  {row['function'][:100]}"
            )
    result = {
        "device": where,
        "settings": config.to_dict(),
        "update_graph": args.update_graph,
        "losses": [float(loss) for loss in losses],
        "tokens_per_s": tokens / seconds,
        "ms_per_update": 1e3 * seconds / args.updates,
        "host_feed_wait_ms": feed_wait_ms,
        "host_step_call_ms": step_call_ms,
        "ms_by_category": kinds.to_dict(),
        "rows_per_update": rows,
        "loss_slots_per_update": slots,
        "tflop_per_update": {kind: value / 1e12 for kind, value in flops.items()},
        "tflops_by_category": rates,
        "peak_bf16_tflops": peak,
        "top_kernels": per_update.head(TOP).reset_index(names="name").to_dict(orient="records"),
        "host_top_functions": host_top,
        "device_idle": idle,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
