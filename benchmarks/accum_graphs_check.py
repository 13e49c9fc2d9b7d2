"""Seeded check that a speed change leaves the loss curve where it was: the paper's accumulation (32 × 8 rows
a step) compiled without CUDA graphs (the previous code) against CUDA graphs with gradients taken out of
the graphs' memory after each micro-batch (``TrainStep`` now), same seed, same batches; a second seed of the
previous code gives the size of seed noise. The documents setting (``batch_documents``) is checked the same
way. Prints one JSON line per comparison and a table.

    python benchmarks/accum_graphs_check.py --steps 300 --out OUT.json    # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from bench_training import CACHE, bench_config, paper_settings

DEVICE = torch.device("cuda")


def losses(kind: str, mode: str, seed: int, steps: int) -> tuple[np.ndarray, float]:
    """Per-step loss of ``steps`` updates of BERT-mini in setting ``kind``, and the seconds they took."""
    from attngeom.training.corpus import load_corpus
    from attngeom.training.document_batches import DocumentBatches
    from attngeom.training.loop import learning_rate, make_optimizer
    from attngeom.training.model import build_model
    from attngeom.training.step import TrainStep, feed, feed_updates, grouped
    from attngeom.training.stream_batches import PackedBatches

    config = bench_config(CACHE, 4, 32, **paper_settings(kind, steps), seed=seed)
    corpus = load_corpus(config, progress=False)
    torch.manual_seed(seed)
    model = build_model(config, corpus.vocab_size).to(DEVICE).train()
    optimizer = make_optimizer(model, config, DEVICE)
    autocast = partial(torch.autocast, "cuda", dtype=torch.bfloat16)
    step = TrainStep(model, optimizer, config, DEVICE, autocast, mode=mode)
    if kind == "documents":
        groups = (
            u.micro_batches for u in feed_updates(DocumentBatches(corpus, config), range(steps), DEVICE)
        )
    else:
        groups = grouped(feed(PackedBatches(corpus, config), range(steps * 8), DEVICE), 8)
    out = []
    start = time.perf_counter()
    for i in range(steps):
        out.append(step(next(groups), learning_rate(config, i)).loss)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    torch._dynamo.reset()
    return torch.stack(out).double().cpu().numpy(), seconds


def smooth(values: np.ndarray, window: int = 20) -> np.ndarray:
    return np.convolve(values, np.ones(window) / window, mode="valid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--kinds", nargs="+", default=["accum", "documents"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    results = []
    for kind in args.kinds:
        before, t_before = losses(kind, "default", 0, args.steps)
        after, t_after = losses(kind, "reduce-overhead", 0, args.steps)
        other_seed, _ = losses(kind, "default", 1, args.steps)
        result = {
            "setting": kind,
            "steps": args.steps,
            "gpu": torch.cuda.get_device_name(),
            "final_loss_before": float(before[-20:].mean()),
            "final_loss_after": float(after[-20:].mean()),
            "final_loss_other_seed": float(other_seed[-20:].mean()),
            "mean_abs_gap_after_vs_before": float(np.abs(smooth(after) - smooth(before)).mean()),
            "mean_abs_gap_seed1_vs_seed0": float(np.abs(smooth(other_seed) - smooth(before)).mean()),
            "s_per_update_before": t_before / args.steps,
            "s_per_update_after": t_after / args.steps,
            "loss_before": before.tolist(),
            "loss_after": after.tolist(),
            "loss_other_seed": other_seed.tolist(),
        }
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if not k.startswith("loss_")}), flush=True)
        args.out.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
