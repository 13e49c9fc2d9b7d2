"""Rewrite the supported-model table in README.md from the architecture registry.

    python scripts/support_table.py [--check] [README]

Only the section between ``<!-- support-table:start -->`` and ``<!-- support-table:end -->`` is
replaced (the section is appended, or README.md created, if missing). ``--check`` writes nothing and
exits 1 when the README is out of date.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from attngeom.architectures.support import with_support_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "readme", nargs="?", default=Path(__file__).resolve().parents[1] / "README.md", type=Path
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the README table is out of date")
    args = parser.parse_args(argv)
    current = args.readme.read_text() if args.readme.exists() else ""
    updated = with_support_table(current)
    if args.check:
        if updated != current:
            print(
                f"{args.readme}: supported-model table is out of date; run scripts/support_table.py",
                file=sys.stderr,
            )
            return 1
        return 0
    if updated != current:
        temporary = args.readme.with_name(f".{args.readme.name}.tmp")
        temporary.write_text(updated)
        os.replace(temporary, args.readme)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
