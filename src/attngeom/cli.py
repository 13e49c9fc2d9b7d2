"""The ``attngeom`` command line: ``score`` models; other subcommands plug in from their modules."""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import InputError, machine_refusal

if TYPE_CHECKING:
    import pandas as pd

    from .engine import Settings

PLUGINS = {
    "train": "attngeom.training.cli",
    "paper-config": "attngeom.pipeline.paper_config",
    "support-table": "attngeom.report.support_table",
    "zoo": "attngeom.pipeline.zoo",
    "cache": "attngeom.cache",
}
"""Subcommand → module exposing ``configure_parser(parser)`` and ``run(args) -> int``."""


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Median and interquartile range over layers of the layer rows, per stack (printed by ``score``)."""
    from .report.summary import summarize

    return summarize(frame).droplevel("model_id")


def _configure_score(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "models",
        nargs="+",
        metavar="MODEL",
        help="Hugging Face model id, local model directory, or .gguf file; several share one process",
    )
    parser.add_argument(
        "-o",
        "--output",
        help="Parquet file to write (default: scores.parquet); with several MODELs, or ending in '/', "
        "a folder: one <slug of the model id>.parquet per model",
    )
    parser.add_argument(
        "--model-id", help="the model's name in the records (default: hub id, or file/folder name)"
    )
    parser.add_argument("--revision", help="hub revision (branch, tag or commit)")
    parser.add_argument("--device", default="cpu", help="torch device for the math: cpu, cuda or cuda:N")
    parser.add_argument(
        "--dtype", default="float64", choices=("float32", "float64"), help="precision of the math"
    )
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


MATH_THREADS = 8
"""Most threads the math of ``score`` uses unless ``OMP_NUM_THREADS`` says otherwise. A layer is a few
products of about a GFLOP and many small ones and element-wise passes of a few MB: split over dozens of
threads, each thread's share costs less than waking it (a 64-core host spent 34 CPU seconds on a 1B
model that takes 5 on one core, ``benchmarks/README.md``)."""


def _run_score(args: argparse.Namespace) -> int:
    import torch

    from .engine import DTYPES, Settings, local_files
    from .files import check_folder, check_output, slug
    from .scores import GAMMA

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(min(torch.get_num_threads(), MATH_THREADS))
    settings = Settings.checked(args.device, DTYPES[args.dtype], args.variant, GAMMA)
    if args.model_id is not None and not args.model_id.strip():
        raise InputError("--model-id is empty; give the name the records should carry")
    into_folder = args.output is not None and args.output.endswith(("/", os.sep))
    if len(args.models) == 1 and not into_folder:
        _score_one(args.models[0], args, settings, args.output or "scores.parquet")
        return 0
    if args.model_id is not None and len(args.models) > 1:
        raise InputError("--model-id names one model; with several MODELs each is named by its own id")
    if args.output is None:
        raise InputError("several MODELs need -o FOLDER (one Parquet file per model)")
    folder = check_folder(args.output)
    models = [path for model in args.models for path in local_files(model)]
    _outside_models(folder, models)
    written: set[Path] = set()

    def output_for(model: str, model_id: str) -> Path:
        try:
            output = folder / f"{slug(model_id)}.parquet"
        except ValueError as err:  # an id with an empty path component
            raise InputError(f"{model}: model id {model_id!r} cannot name a file ({err})") from err
        if output in written:
            raise InputError(
                f"{model}: model id {model_id!r} is an earlier model's too; score it alone with --model-id"
            )
        written.add(output)
        return check_output(output, protect=models)

    failed = 0
    for model in args.models:
        try:
            _score_one(model, args, settings, lambda model_id, model=model: output_for(model, model_id))
        except (InputError, OSError) as err:  # one bad model does not stop the others
            print(_naming(_error_line(err), model), file=sys.stderr)
            failed += 1
    return 2 if failed else 0


def _outside_models(folder: Path, models: list[Path]) -> None:
    """The folder the outputs of several models go into, refused before any is written when it is one of
    the models' folders or lies inside one (each output is then checked against every model too)."""
    place = folder.absolute().resolve()
    for model in models:
        home = model.resolve()
        if model.is_dir() and (place == home or home in place.parents):
            raise InputError(
                f"output folder {folder} is in the folder of the model {model}; choose another -o"
            )


def _score_one(
    model: str, args: argparse.Namespace, settings: Settings, output: str | Callable[[str], Path]
) -> None:
    """Score ``model`` into ``output`` (a file, or a function of the model id naming it:
    ``engine.score_to_file``); print a summary unless quiet."""
    from .engine import score_to_file

    table, written = score_to_file(
        model,
        output,
        settings,
        model_id=args.model_id,
        revision=args.revision,
        full_download=args.full_download,
        progress=not args.quiet,
    )
    if not args.quiet:
        import pandas as pd

        from .records import to_frame

        with pd.option_context("display.float_format", "{:.3f}".format, "display.width", 120):
            print(summary(to_frame(table)).to_string())
        print(f"wrote {table.num_rows} rows to {written}")


def _error_line(err: InputError | OSError) -> str:
    """The one line a user sees; an OSError is the machine's answer (disk, permissions), not a defect."""
    return f"attngeom: error: {err if isinstance(err, InputError) else machine_refusal(err)}"


def _naming(line: str, model: str) -> str:
    """An error line that starts with the model it is about (with several models, which one failed)."""
    prefix = "attngeom: error: "
    message = line.removeprefix(prefix)
    if message.startswith((model, str(Path(model).expanduser()))):
        return line
    return f"{prefix}{model}: {message}"


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; a plug-in's module is imported only when ``argv`` names its subcommand (or names none,
    for the help): ``score`` does not pay for the training and pipeline imports."""
    from .version import __version__

    parser = argparse.ArgumentParser(prog="attngeom", description=__doc__)
    parser.add_argument("--version", action="version", version=f"attngeom {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    score_parser = commands.add_parser("score", help="score every head and layer of one or more models")
    _configure_score(score_parser)
    score_parser.set_defaults(run=_run_score)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    wanted = [command] if command in PLUGINS else [] if command == "score" else list(PLUGINS)
    for name in wanted:
        module_name = PLUGINS[name]
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


WAIT_POLICY = "PASSIVE"
"""OpenMP threads that wait for work sleep instead of spinning (unless ``OMP_WAIT_POLICY`` is set): on a
busy machine spinning threads take the cores the working ones need, and a 1B model scored 1.8× slower
(``benchmarks/README.md``). It must be set before torch is first imported, hence here."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: this process's arguments, as the ``attngeom`` command).

    Run as the command, the process ends when this returns, so its objects are frozen out of the garbage
    collector on the way out: its last full pass over torch's and the libraries' objects at exit took
    0.35 s (``benchmarks/README.md``), and nothing it would collect holds anything but memory.
    """
    is_command = argv is None
    if is_command:
        from . import interrupts

        interrupts.install()
    os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    try:
        return args.run(args)
    except (InputError, OSError) as err:
        print(_error_line(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attngeom: interrupted", file=sys.stderr)
        return 130
    finally:
        if is_command:
            gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
