"""Snakemake script: the per-head view of one model (distribution of per-head scores per layer)."""

import json
from pathlib import Path

import pandas as pd

from attngeom import figures
from attngeom.records import read_scores


def main(snakemake) -> None:
    status = json.loads(open(snakemake.input.status).read())
    scores = read_scores(snakemake.input.scores) if status["status"] == "ok" else pd.DataFrame()
    figures.heads_figure(
        scores,
        snakemake.params.title,
        str(Path(snakemake.output[0]).with_suffix("")),
        status.get("reason", ""),
    )


main(snakemake)  # noqa: F821
