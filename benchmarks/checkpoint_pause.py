"""How long training waits for a checkpoint: ``CheckpointWriter.save`` on a model and its AdamW state,
several times in a row with GPU work between, as the training loop saves every ``checkpoint_every`` updates.
Prints, for each save, the time the caller was blocked and how much later the file was in place.

    python benchmarks/checkpoint_pause.py                      # BERT-base (12 layers) on CUDA
    python benchmarks/checkpoint_pause.py --layers 4 --saves 3
    python benchmarks/checkpoint_pause.py --device cpu --layers 4 --saves 2 --work 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from attngeom.training.checkpoint import CheckpointWriter
from attngeom.training.config import make_config
from attngeom.training.loop import make_optimizer
from attngeom.training.model import build_model


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--saves", type=int, default=4)
    parser.add_argument(
        "--work", type=int, default=40, help="matrix products between saves (the next updates)"
    )
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    config = make_config({"n_layers": args.layers, "device": args.device})
    model = build_model(config, vocab_size=30522).to(device)
    optimizer = make_optimizer(model, config, device)
    sum(p.float().sum() for p in model.parameters()).backward()
    optimizer.step()  # AdamW's moments exist, as in a checkpoint taken during training
    size = 2048 if device.type == "cuda" else 256
    with tempfile.TemporaryDirectory() as folder, CheckpointWriter() as writer:
        for number in range(args.saves):
            sync()
            start = time.perf_counter()
            writer.save(
                Path(folder) / "state.pt", model.state_dict(), optimizer.state_dict(), number, 0.0, device
            )
            blocked = time.perf_counter() - start
            x = torch.randn(size, size, device=device)
            for _ in range(args.work):
                x = x @ x
                x = x / x.norm()
            sync()
            start = time.perf_counter()
            writer.wait()
            print(
                f"save {number + 1}: training blocked {blocked:.3f} s; "
                f"the file in place {time.perf_counter() - start:.3f} s after the next updates",
                flush=True,
            )


if __name__ == "__main__":
    main()
