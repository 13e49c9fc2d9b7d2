"""DDP scaling of attngeom's training on one machine: the same BERT run on 1, 2 and 4 GPUs (torchrun).

    python benchmarks/bench_training.py prepare                     # here: corpus + tokenizer
    python benchmarks/ddp_scaling.py OUT [--grad-accum 8] [--layers 12] [--steps 30]   # on the GPU host

Micro-batch 32 × 512 per GPU, compiled, bf16. Tokens/s from each run's own loss log, between the
first third of the steps and the last (compilation excluded). On 4 GPUs the 1- and 2-GPU runs go side
by side on GPUs 0 and 2–3, then the 4-GPU run; on 2 GPUs the 1-GPU run, then the 2-GPU run. OUT gets
each run's loss log and ``ddp.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import torch

DATA = Path(__file__).parent / ".cache" / "training"


def start(gpus: int, devices: str, out: Path, settings: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=devices, OMP_NUM_THREADS="8")
    launcher = [sys.executable]
    if gpus > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}"]
    command = [*launcher, "-m", "attngeom.cli", "train", "--quiet", "--out", str(out), *settings]
    return subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def waves(gpus: int) -> list[list[tuple[int, str, str]]]:
    """Runs of (GPUs, CUDA_VISIBLE_DEVICES, tag) started together: on 4 GPUs 1 and 2 GPUs side by side,
    then 4; on 2 or 3 GPUs, 1 GPU then 2."""
    if gpus >= 4:
        return [[(1, "0", "1gpu"), (2, "2,3", "2gpu")], [(4, "0,1,2,3", "4gpu")]]
    if gpus >= 2:
        return [[(1, "0", "1gpu")], [(2, "0,1", "2gpu")]]
    raise SystemExit(f"ddp_scaling: needs 2 or more GPUs, this host has {gpus}")


def tokens_per_second(loss: Path, first: int, last: int) -> float:
    log = pd.read_parquet(loss).set_index("step")
    return float((log.tokens[last] - log.tokens[first]) / (log.elapsed_s[last] - log.elapsed_s[first]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--grad-accum", type=int, default=8)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    first = max(1, args.steps // 3)
    settings = [
        f"dataset={DATA / 'sotu_paragraphs.txt'}",
        f"tokenizer={DATA / 'tokenizer.json'}",
        f"n_layers={args.layers}",
        f"steps={args.steps}",
        "batch_size=32",
        f"grad_accum={args.grad_accum}",
        "seq_len=512",
        f"log_every={first}",
        f"score_every={args.steps * 10}",
        f"checkpoint_every={args.steps * 10}",
        "warmup_steps=10",
        "device=cuda",
    ]
    work = Path(tempfile.mkdtemp(prefix="attngeom-ddp-"))
    settings.append(f"cache_dir={work / 'tokens'}")
    plan = waves(torch.cuda.device_count())
    result: dict[str, float | str] = {}
    for wave in plan:
        running = [(tag, start(n, d, work / tag, settings, args.out / f"{tag}.log")) for n, d, tag in wave]
        for tag, process in running:
            process.wait()
            try:
                result[tag] = tokens_per_second(work / tag / "loss.parquet", first, args.steps)
                shutil.copy(work / tag / "loss.parquet", args.out / f"{tag}_loss.parquet")
            except (OSError, KeyError) as err:
                result[tag] = f"failed ({err}); see {tag}.log"
    for tag in ("2gpu", "4gpu"):
        if isinstance(result.get("1gpu"), float) and isinstance(result.get(tag), float):
            result[f"{tag}_over_1gpu"] = result[tag] / result["1gpu"]
    print(json.dumps(result, indent=1))
    (args.out / "ddp.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
