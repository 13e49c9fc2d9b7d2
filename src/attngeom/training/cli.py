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
    parser.add_argument(
        "--seeds",
        metavar="SEED,SEED,...",
        help="train one run per seed (and per --inits init) together in one process, their weights stacked "
        "in one compiled step; --out then names each run's folder with {seed} (and {init})",
    )
    parser.add_argument("--inits", metavar="INIT,INIT,...", help="with or without --seeds: these inits")
    parser.add_argument("--stop-at", type=int, metavar="STEP", help="stop after this step (resume later)")
    parser.add_argument(
        "--restart",
        action="store_const",
        const="always",
        default="never",
        help="move an earlier run in RUN_DIR aside (to RUN_DIR.replaced-<UTC time>) and train afresh; "
        "without it a run with the same settings resumes and one with other settings is an error",
    )
    parser.add_argument(
        "--restart-if-changed",
        dest="restart",
        action="store_const",
        const="if-changed",
        help="resume an earlier run in RUN_DIR with the same settings; move one with other settings aside "
        "and train afresh (what the pipeline's train jobs do)",
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
    if args.seeds or args.inits:
        return run_stacked(args, layers, config)
    out = train(
        config,
        args.out,
        progress="lines" if args.log_lines else not args.quiet,
        stop_at=args.stop_at,
        restart=args.restart,
    )
    print(f"run folder: {out}")
    return 0


def _listed(value: str, name: str) -> list[str]:
    """``0,1,2`` → ["0", "1", "2"] (each checked as the setting ``name`` by ``make_config``)."""
    items = [item.strip() for item in value.split(",")]
    if not all(items):
        raise ConfigError(f"--{name}s {value!r}: give a comma-separated list, e.g. --{name}s 0,1,2")
    return items


def distinct_values(value: str, name: str, layers: list[dict]) -> list:
    """``--seeds``/``--inits`` as the values the runs get (``1e3`` is the seed 1000), each once: two
    spellings of one value would train the same run twice, in two folders."""
    given = _listed(value, name)
    values = [getattr(make_config(*layers, {name: item}), name) for item in given]
    for index, item in enumerate(values):
        if item in values[:index]:
            first = given[values.index(item)]
            raise ConfigError(
                f"--{name}s {value!r}: {first} and {given[index]} are the same {name} ({item}); "
                f"give each {name} once"
            )
    return values


def run_folders(template: str, seeds: list, inits: list[str]) -> list[tuple[str, str, str]]:
    """(folder, seed, init) of every run: ``{seed}`` and ``{init}`` in ``template`` name each one's folder."""
    for key, values in (("seed", seeds), ("init", inits)):
        if len(set(values)) > 1 and f"{{{key}}}" not in template:
            raise ConfigError(
                f"--out {template} names one folder for several runs: put {{{key}}} in it "
                "(e.g. --out runs/enc-{init}-{seed})"
            )
    return [
        (template.replace("{seed}", str(seed)).replace("{init}", init), seed, init)
        for init in inits
        for seed in seeds
    ]


def run_stacked(args: argparse.Namespace, layers: list[dict], config) -> int:
    """``--seeds``/``--inits``: every combination trained together (``stacked.train_stacked``)."""
    from .stacked import train_stacked

    seeds = distinct_values(args.seeds, "seed", layers) if args.seeds else [config.seed]
    inits = distinct_values(args.inits, "init", layers) if args.inits else [config.init]
    runs = run_folders(args.out, seeds, inits)
    configs = [make_config(*layers, {"seed": seed, "init": init}) for _, seed, init in runs]
    outs = train_stacked(
        configs,
        [folder for folder, _, _ in runs],
        progress="lines" if args.log_lines else not args.quiet,
        stop_at=args.stop_at,
        restart=args.restart,
    )
    for out in outs:
        print(f"run folder: {out}")
    return 0
