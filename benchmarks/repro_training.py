"""Reduced-scale reproduction of Section 4 on one GPU: BERT-mini (4 layers), encoder and decoder,
random and symmetric init, on the State of the Union corpus; the four runs share the GPU at once.

    python benchmarks/bench_training.py prepare        # here: corpus + tokenizer into benchmarks/.cache
    python benchmarks/repro_training.py --steps 3000   # on the GPU machine
    python benchmarks/repro_training.py --summarise benchmarks/results/training_repro

Writes each run's config.yaml, loss.parquet and scores.parquet under --out (checkpoints and final
models stay in the cache folder), then a summary of final loss, symmetry/directionality medians and
the symmetric-init speed-up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

CACHE = Path(__file__).parent / ".cache" / "training"
RUNS = [(objective, init) for objective in ("encoder", "decoder") for init in ("random", "symmetric")]


def settings(
    steps: int, lr: float = 5e-4, warmup: int = 200, compile: bool = False, decoder_loss: str = "causal"
) -> list[str]:
    return [
        f"decoder_loss={decoder_loss}",
        f"dataset={CACHE / 'sotu_paragraphs.txt'}",
        f"tokenizer={CACHE / 'tokenizer.json'}",
        f"cache_dir={CACHE / 'tokens'}",
        "n_layers=4",
        f"steps={steps}",
        "batch_size=64",
        "grad_accum=1",
        "seq_len=256",
        f"lr={lr}",
        f"warmup_steps={warmup}",
        f"compile={compile}",
        "log_every=50",
        "score_every=100",
        "checkpoint_every=500",
    ]


def launch(steps: int, deadline_s: float, work: Path, runs: list[tuple[str, str]], extra: dict) -> None:
    """Tokenise once, then train the four runs concurrently; stop them (resumable) at the deadline."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    base = [sys.executable, "-m", "attngeom.cli", "train", "--quiet"]
    subprocess.run([*base, "--out", str(work / "warmup"), *settings(1)], env=env, check=True)
    procs = []
    for objective, init in runs:
        out = work / f"{objective}-{init}"
        log = (work / f"{objective}-{init}.log").open("w")
        args = [*base, "--out", str(out), *settings(steps, **extra), f"objective={objective}", f"init={init}"]
        procs.append(subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT))
    start = time.monotonic()
    while any(p.poll() is None for p in procs) and time.monotonic() - start < deadline_s:
        time.sleep(2)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    print(f"runs took {time.monotonic() - start:.0f} s; exit codes {[p.wait() for p in procs]}")


def collect(work: Path, out: Path) -> None:
    for objective, init in RUNS:
        if not (work / f"{objective}-{init}").exists():
            continue
        run = work / f"{objective}-{init}"
        dest = out / run.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("config.yaml", "loss.parquet", "scores.parquet"):
            if (run / name).exists():
                shutil.copy(run / name, dest / name)


def summarise(folder: Path) -> pd.DataFrame:
    """Final smoothed loss, layer-median symmetry / directionality, and the symmetric-init speed-up."""
    from attngeom.training.speedup import smoothed, speedup

    rows = []
    for objective, init in RUNS:
        run = folder / f"{objective}-{init}"
        if not (run / "loss.parquet").exists():
            continue
        loss = pd.read_parquet(run / "loss.parquet")
        scores = pd.read_parquet(run / "scores.parquet")
        layers = scores[scores["head"].isna() & (scores["step"] == scores["step"].max())]
        rows.append(
            {
                "objective": objective,
                "init": init,
                "steps": int(loss["step"].max()),
                "final_loss": float(smoothed(loss)["loss"].iloc[-1]),
                "symmetry_median": float(layers["symmetry"].median()),
                "directionality_median": float(layers["directionality"].median()),
            }
        )
    table = pd.DataFrame(rows)
    for objective in ("encoder", "decoder"):
        paths = {i: folder / f"{objective}-{i}" / "loss.parquet" for i in ("random", "symmetric")}
        if not all(p.exists() for p in paths.values()):
            continue
        runs = {i: pd.read_parquet(p) for i, p in paths.items()}
        table.loc[(table["objective"] == objective) & (table["init"] == "symmetric"), "speedup_percent"] = (
            speedup(runs["random"], runs["symmetric"])
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument(
        "--objectives", nargs="+", default=["encoder", "decoder"], choices=["encoder", "decoder"]
    )
    parser.add_argument("--decoder-loss", default="causal", choices=["causal", "masked"])
    parser.add_argument("--deadline", type=float, default=400, help="seconds before the runs are stopped")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/training_repro"))
    parser.add_argument("--summarise", type=Path, metavar="FOLDER", help="only print the summary of FOLDER")
    args = parser.parse_args()
    if args.summarise:
        table = summarise(args.summarise)
        print(table.to_string(index=False))
        table.to_csv(args.summarise / "summary.csv", index=False)
        return
    work = CACHE / "repro"
    runs = [(o, i) for o, i in RUNS if o in args.objectives]
    extra = {"lr": args.lr, "warmup": args.warmup, "compile": args.compile, "decoder_loss": args.decoder_loss}
    launch(args.steps, args.deadline, work, runs, extra)
    collect(work, args.out)


if __name__ == "__main__":
    main()
