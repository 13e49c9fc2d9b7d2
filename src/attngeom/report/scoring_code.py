"""Which training runs recorded their evolution with other scoring code than this attngeom's.

A run scores its live model every ``score_every`` steps as it trains, each row with the hash of the scoring
code that computed it (``code_hash``, ``attngeom.provenance``). A change to that code rescores the runs'
final models (rule score), but not their earlier steps, whose weights are gone: the tables and figures that
draw the evolution name such runs instead of mixing their scores silently with current ones, and say how
to refresh them (docs/pipeline.md, "Reruns follow the code").
"""

from __future__ import annotations

import pandas as pd

from ..provenance import code_hash
from ..training.bookkeeping import other_scoring_code

REFRESH = "snakemake's --forcerun train"
"""Trains again every finished run whose recorded scores other scoring code computed (``runs.RunFolder``);
the others only save their final model again."""

NAMED = 4
"""Runs named in a note; more are counted."""


def other_code_runs(scores: pd.DataFrame, current: str | None = None) -> list[str]:
    """The runs (``run`` column) with a score row that other scoring code computed than ``current``
    (default: this attngeom's), sorted."""
    other = other_scoring_code(scores, current or code_hash("scoring"))
    return sorted(scores.loc[other, "run"].unique())


def other_code_note(scores: pd.DataFrame, current: str | None = None) -> str:
    """One sentence naming the runs of ``scores`` whose evolution other scoring code computed, and how to
    refresh it; empty when every row is the current code's."""
    current = current or code_hash("scoring")
    runs = other_code_runs(scores, current)
    if not runs:
        return ""
    named = ", ".join(runs[:NAMED]) + (f" and {len(runs) - NAMED} more" if len(runs) > NAMED else "")
    return (
        f"The evolution scores of {len(runs)} of {scores['run'].nunique()} runs ({named}) were computed by "
        f"other scoring code than this attngeom's ({current}); the scores of their final models "
        f"(results/scores/) follow the scoring code, their earlier steps are refreshed only by training them "
        f"again ({REFRESH}; docs/pipeline.md)."
    )
