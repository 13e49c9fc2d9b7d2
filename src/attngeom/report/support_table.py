"""Rewrite the supported-model table of the documentation site (``docs/support.md``) from the conformance run
and the architecture registry.

Only the section between ``<!-- support-table:start -->`` and ``<!-- support-table:end -->`` of the file
named on the command line is replaced; a file without both markers is refused, so the command never
creates or appends to a page it was not meant for (run in another folder, ``docs/support.md`` there is some
other project's). ``--check`` writes nothing and exits 1 when the table is out of date.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..architectures.support import END, START, with_support_table
from ..errors import InputError
from ..files import write_text


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "page", type=Path, help="the file holding the table's markers (attngeom's own docs/support.md)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is out of date")
    parser.add_argument(
        "--conformance",
        action="store_true",
        help="first rerun the generated conformance of every model_type and rewrite the packaged support.json",
    )
    parser.add_argument(
        "--jobs", type=int, default=2, help="processes for --conformance (default: %(default)s)"
    )


def run(args: argparse.Namespace) -> int:
    current = _read(args.page)
    if args.conformance:
        from ..conformance.run import main as conformance_main

        conformance_main(["--jobs", str(args.jobs)])
        from ..architectures.discovery.validated import conformance

        conformance.cache_clear()
    updated = with_support_table(current)
    if args.check:
        if updated != current:
            print(
                f"{args.page}: supported-model table is out of date; run attngeom support-table {args.page}",
                file=sys.stderr,
            )
            return 1
        return 0
    if updated != current:
        write_text(args.page, updated)
    return 0


def _read(page: Path) -> str:
    if not page.is_file():
        raise InputError(
            f"{page}: no such file; name the page that holds the {START} markers (docs/support.md)"
        )
    try:
        text = page.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{page}: cannot be read ({err}); name attngeom's docs/support.md") from None
    start, end = text.find(START), text.find(END)
    if start < 0 or end < start:
        raise InputError(
            f"{page} holds no {START} ... {END} section; name attngeom's docs/support.md, which does"
        )
    return text
