"""Build a random-initialised transformers model (a control: random matrices score about 0).

    python scripts/build_random_model.py bert -o results/models/random/bert \
        --set hidden_size=64 --set num_hidden_layers=2 --seed 0

``AutoConfig.for_model(model_type, **settings)`` then ``save_pretrained`` (safetensors), written to a
temporary folder beside the output and renamed into place. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel


def parse_setting(text: str) -> tuple[str, object]:
    """``key=value`` with value parsed as JSON when it is JSON (numbers, booleans), else kept a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set {text!r}: expected key=value")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def build(model_type: str, settings: dict, seed: int, output: Path) -> int:
    """Save the model under ``output``; returns its parameter count."""
    try:
        config = AutoConfig.for_model(model_type, **settings)
    except ValueError as err:
        raise SystemExit(f"build_random_model: error: model type {model_type!r}: {err}") from None
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    try:
        model.save_pretrained(temporary, safe_serialization=True)
        if output.exists():
            shutil.rmtree(output)
        os.replace(temporary, output)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model_type", help="a transformers model_type, e.g. bert, gpt2, llama")
    parser.add_argument("-o", "--output", type=Path, required=True, help="folder to write")
    parser.add_argument("--set", type=parse_setting, action="append", default=[], help="config key=value")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    n_params = build(args.model_type, dict(args.set), args.seed, args.output)
    print(f"wrote random {args.model_type} ({n_params} parameters) to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
