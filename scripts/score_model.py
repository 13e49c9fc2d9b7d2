"""Snakemake script: score one model with ``attngeom score``; record bad input as a failure, not a crash.

Exit 2 with ``attngeom: error: ...`` is the CLI's answer for input it cannot score (unsupported family,
corrupt or missing files, gated repo): that writes an empty Parquet file and a status saying why, so
the other models and the tables go on. Any other error propagates and fails the job. The CLI runs in
this process (one interpreter start per job instead of two).
"""

import contextlib
import io
import json
import time
from pathlib import Path

import pandas as pd

from attngeom.cli import main as attngeom_main
from attngeom.tables import write_text

PREFIX = "attngeom: error: "


def outcome(returncode: int, stderr: str, what: str, log: str) -> dict:
    """``ok``, ``failed`` with the CLI's one-line reason (exit 2), or a crash that must fail the job."""
    lines = stderr.strip().splitlines()
    if returncode == 0:
        return {"status": "ok"}
    if returncode == 2 and lines and lines[-1].startswith(PREFIX):
        return {"status": "failed", "reason": lines[-1][len(PREFIX) :]}
    raise SystemExit(f"{what} crashed with exit code {returncode}; see {log}")


def main(snakemake) -> None:
    p = snakemake.params
    scores, status, log = Path(snakemake.output.scores), snakemake.output.status, snakemake.log[0]
    argv = ["score", p.location, "-o", str(scores), "--device", p.device, "--dtype", p.dtype]
    argv += ["--variant", p.variant, "--quiet"] + (["--revision", p.revision] if p.revision else [])
    argv += ["--full-download"] if p.full_download else []
    start = time.monotonic()
    stderr = io.StringIO()
    with open(log, "w") as log_file:
        log_file.write("attngeom " + " ".join(argv) + "\n")
        try:
            with contextlib.redirect_stdout(log_file), contextlib.redirect_stderr(stderr):
                returncode = attngeom_main(argv)
        except SystemExit as exit_:  # argparse rejects its arguments
            returncode = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            log_file.write(stderr.getvalue())
    record = {"model": p.model, "location": p.location, "seconds": round(time.monotonic() - start, 3)}
    record.update(outcome(returncode, stderr.getvalue(), f"attngeom score {p.location}", log))
    if record["status"] == "failed":
        pd.DataFrame().to_parquet(scores)
    write_text(json.dumps(record, indent=1) + "\n", status)


if "snakemake" in globals():
    main(snakemake)  # noqa: F821
