"""Train a BERT encoder or decoder from scratch, scoring its attention geometry as it learns."""

from __future__ import annotations

import argparse

from .config import (
    RESOURCE_KEYS,
    ConfigError,
    make_config,
    parse_overrides,
    pipeline_training,
    read_config_file,
    read_yaml,
)


def select_run(path: str, name: str) -> dict:
    """The overrides of run ``name`` in a pipeline config (``training: runs: [{name: ...}]``)."""
    runs = pipeline_training(read_yaml(path), path).get("runs") or []
    if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
        raise ConfigError(f"{path}: training: runs: must be a list of mappings, each with a name")
    for run in runs:
        if run.get("name") == name:
            return {k: v for k, v in run.items() if k != "name" and k not in RESOURCE_KEYS}
    raise ConfigError(f"{path} has no training run named {name!r} (has {[r.get('name') for r in runs]})")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "settings", nargs="*", metavar="NAME=VALUE", help="overrides, e.g. steps=1000 init=symmetric"
    )
    parser.add_argument(
        "--out", required=True, metavar="RUN_DIR", help="run folder (resumed if it holds a checkpoint)"
    )
    parser.add_argument(
        "--config",
        metavar="YAML",
        help="settings file: a flat mapping, or a pipeline config (training: defaults:)",
    )
    parser.add_argument(
        "--run",
        dest="run_name",
        metavar="NAME",
        help="with a pipeline --config: take the overrides of this run",
    )
    parser.add_argument("--stop-at", type=int, metavar="STEP", help="stop after this step (resume later)")
    parser.add_argument(
        "--restart",
        action="store_const",
        const="always",
        default="never",
        help="move an earlier run in RUN_DIR aside (to RUN_DIR.replaced-<UTC time>) and train afresh; "
        "without it a run with the same settings resumes and one with other settings is an error",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--log-lines",
        action="store_true",
        help="instead of a progress bar, a line on stdout per log_every steps (step, loss, tokens/s, ETA), "
        "for a log file",
    )


def run(args: argparse.Namespace) -> int:
    from .loop import train

    layers = [read_config_file(args.config)] if args.config else []
    if args.run_name:
        if not args.config:
            raise ConfigError("--run needs --config pointing at a pipeline config with training: runs:")
        layers.append(select_run(args.config, args.run_name))
    layers.append(parse_overrides(args.settings))
    config = make_config(*layers)
    out = train(
        config,
        args.out,
        progress="lines" if args.log_lines else not args.quiet,
        stop_at=args.stop_at,
        restart=args.restart,
    )
    print(f"run folder: {out}")
    return 0
