"""The ``attngeom`` command line: ``score`` one model; other subcommands plug in from their modules."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import pandas as pd

from .errors import InputError

PLUGINS = {
    "train": "attngeom.training.cli",
    "paper-config": "attngeom.pipeline.paper_config",
    "support-table": "attngeom.support_table",
}
"""Subcommand → module exposing ``configure_parser(parser)`` and ``run(args) -> int``."""

DTYPES = ("float32", "float64")


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Median and interquartile range over layers of the layer rows, per stack (printed by ``score``)."""
    from .tables import METRICS, layer_statistics

    stats = layer_statistics(frame, ["stack"]).set_index("stack")
    columns: dict[str, pd.Series] = {"layers": stats["n_layers"]}
    for name in METRICS:
        columns[f"{name} median"] = stats[f"{name}_median"]
        columns[f"{name} IQR"] = stats[f"{name}_p75"] - stats[f"{name}_p25"]
    return pd.DataFrame(columns)


def _configure_score(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="Hugging Face model id, local model directory, or .gguf file")
    parser.add_argument(
        "-o", "--output", default="scores.parquet", help="Parquet file to write (default: %(default)s)"
    )
    parser.add_argument("--revision", help="hub revision (branch, tag or commit)")
    parser.add_argument("--device", default="cpu", help="torch device for the math, e.g. cpu or cuda")
    parser.add_argument("--dtype", default="float64", choices=DTYPES, help="precision of the math")
    parser.add_argument(
        "--variant",
        default="excess",
        choices=("excess", "eq17"),
        help="directionality: excess over the threshold (published tables) or the paper's Eq. 17",
    )
    parser.add_argument(
        "--full-download", action="store_true", help="hub ids: download whole files, not q/k byte ranges"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar and no summary")


def _run_score(args: argparse.Namespace) -> int:
    import torch

    from .engine import score
    from .records import write_scores

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {args.device}: no CUDA device is available; use --device cpu")
    frame = score(
        args.model,
        revision=args.revision,
        device=args.device,
        dtype=getattr(torch, args.dtype),
        variant=args.variant,
        progress=not args.quiet,
        full_download=args.full_download,
    )
    path = write_scores(frame, args.output)
    if not args.quiet:
        with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 120):
            print(summary(frame).to_string())
        print(f"wrote {len(frame)} rows to {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .version import __version__

    parser = argparse.ArgumentParser(prog="attngeom", description=__doc__)
    parser.add_argument("--version", action="version", version=f"attngeom {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    score_parser = commands.add_parser("score", help="score every head and layer of one model")
    _configure_score(score_parser)
    score_parser.set_defaults(run=_run_score)
    for name, module_name in PLUGINS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue
        sub = commands.add_parser(name, help=(module.__doc__ or "").strip().splitlines()[0])
        module.configure_parser(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except InputError as err:
        print(f"attngeom: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attngeom: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
