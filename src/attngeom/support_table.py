"""Rewrite the supported-model table in README.md from the conformance run and the architecture registry.

Only the section between ``<!-- support-table:start -->`` and ``<!-- support-table:end -->`` is
replaced (the section is appended, or the README created, if missing). ``--check`` writes nothing and
exits 1 when the README is out of date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .architectures.support import with_support_table
from .files import write_text


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("readme", nargs="?", default="README.md", type=Path, help="default: %(default)s")
    parser.add_argument("--check", action="store_true", help="exit 1 if the README table is out of date")
    parser.add_argument(
        "--conformance",
        action="store_true",
        help="first rerun the generated conformance of every model_type and rewrite the packaged support.json",
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="processes for --conformance (default: %(default)s)"
    )


def run(args: argparse.Namespace) -> int:
    if args.conformance:
        from .conformance.run import main as conformance_main

        conformance_main(["--jobs", str(args.jobs)])
        from .architectures.validated import conformance

        conformance.cache_clear()
    current = args.readme.read_text() if args.readme.exists() else ""
    updated = with_support_table(current)
    if args.check:
        if updated != current:
            print(
                f"{args.readme}: supported-model table is out of date; run attngeom support-table",
                file=sys.stderr,
            )
            return 1
        return 0
    if updated != current:
        write_text(args.readme, updated)
    return 0
