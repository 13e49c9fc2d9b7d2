"""The authors' own training logs (config/reference/authors-logs/, from their repository) as a reference:
their Table 1 by their notebook's formula and by ours, and their value at the horizon of any run of ours.

**Their logs.** ``symmetric-initialization-loss.csv``: one column per run (``bert_small`` = BERT-mini,
4 layers; ``bert`` = BERT-base, 12 layers; encoders on Jigsaw, Wikipedia and RedPajama; ``--symmetric-init``
or not), one row per logged point: the HF Trainer's mean training loss over the last 200 updates
(``logging_steps=200``), so row i is step 200·(i + 1), 1,000 rows to 200,000 updates; one seed.

**Their init and ours.** Their random arm is BERT's init (our ``random``); their ``--symmetric-init``
replaces q, k, v by fresh ``nn.Linear`` layers (PyTorch's default init) and ties W_q = W_k (our
``inits.AUTHORS``): scale and symmetry at once. Their Wikipedia and RedPajama runs are trained
on character-spaced text, Jigsaw on word pieces, so a run of ours is set beside theirs by its tokens
(``counterparts``).

**Their notebook's formula** (``notebooks-figures-tables/table-symmetric-initialization.ipynb``):
speed-up = 1 − idx/N, idx = ``(symmetric < random.iloc[-1]).idxmax()`` over the N logged means, unsmoothed.
``idxmax`` of an all-False column is 0, so a symmetric run that never gets below the random run's final
loss scores 100% (12-layer Jigsaw: the paper prints 0%). ``notebook_speedup`` computes it as theirs;
``table1`` sets it beside the paper's numbers and beside our rules (``speedup``) on the same logs.
"""

from __future__ import annotations

import os
import re

import pandas as pd

from ..training.inits import ARM, AUTHORS, REFERENCE
from .speedup import CLAIM_RULE, loss_gap, paper_speedup, signed_speedup, speedup

LOSS_FILE = "symmetric-initialization-loss.csv"
LOG_EVERY = 200
"""The authors logged the mean training loss every 200 updates."""
MODELS = {"bert_small": 4, "bert": 12}
"""Their model names → depth."""
COLUMN = re.compile(
    r"^(bert_small|bert)--(encoder|decoder)--(jigsaw|wikipedia|red_pajama)(--symmetric-init)?$"
)
CHARACTER_DATASETS = ("wikipedia", "red_pajama")
WORD_PIECE_DATASETS = ("jigsaw",)
DATASETS = (*WORD_PIECE_DATASETS, *CHARACTER_DATASETS)


class AuthorsLogsError(ValueError):
    """The authors' loss file is not what their repository publishes."""


def read_logs(folder: str | os.PathLike) -> pd.DataFrame:
    """Their loss file as a long frame: layers, objective, dataset, init (ours: ``inits.REFERENCE`` or
    ``inits.AUTHORS``), step, loss."""
    path = os.path.join(folder, LOSS_FILE)
    wide = pd.read_csv(path)
    frames = []
    for column in wide.columns:
        match = COLUMN.match(column)
        if match is None:
            raise AuthorsLogsError(f"{path}: column {column!r} is not one of the authors' runs")
        model, objective, dataset, symmetric = match.groups()
        loss = pd.to_numeric(wide[column], errors="raise").to_numpy(dtype=float)
        frames.append(
            pd.DataFrame(
                {
                    "layers": MODELS[model],
                    "objective": objective,
                    "dataset": dataset,
                    "init": AUTHORS if symmetric else REFERENCE,
                    "step": LOG_EVERY * (1 + wide.index.to_numpy()),
                    "loss": loss,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def run_log(
    logs: pd.DataFrame, layers: int, dataset: str, init: str, horizon: int | None = None
) -> pd.DataFrame:
    """One encoder run's (step, loss), up to ``horizon`` if given."""
    rows = logs[
        (logs["layers"] == layers)
        & (logs["objective"] == "encoder")
        & (logs["dataset"] == dataset)
        & (logs["init"] == init)
    ]
    if horizon is not None:
        rows = rows[rows["step"] <= horizon]
    return rows[["step", "loss"]].reset_index(drop=True)


def notebook_speedup(random: pd.Series, symmetric: pd.Series) -> float:
    """The authors' notebook's speed-up, in percent, as they compute it: 1 − idx/N with idx the
    ``idxmax`` of ``symmetric < random.iloc[-1]`` over the N logged means (100 if never below)."""
    random, symmetric = random.reset_index(drop=True), symmetric.reset_index(drop=True)
    index = (symmetric < random.iloc[-1]).idxmax()
    return 100.0 * (1 - index / len(random))


def compare(logs: pd.DataFrame, layers: int, dataset: str, horizon: int | None = None) -> dict[str, float]:
    """Their random and symmetric encoder runs of one depth and dataset, cut at ``horizon``: the final
    logged losses, the notebook's speed-up, ours (the paper's formula smoothed, ``first``, the claim rule,
    the signed one), whether theirs is censored by the claim rule, and the loss gap at the horizon."""
    random = run_log(logs, layers, dataset, REFERENCE, horizon)
    symmetric = run_log(logs, layers, dataset, AUTHORS, horizon)
    if random.empty or symmetric.empty:
        raise AuthorsLogsError(f"the authors published no {layers}-layer encoder pair on {dataset}")
    return {
        "steps": int(random["step"].max()),
        "random_loss": float(random["loss"].iloc[-1]),
        "symmetric_loss": float(symmetric["loss"].iloc[-1]),
        "speedup_notebook": notebook_speedup(random["loss"], symmetric["loss"]),
        "speedup_paper": paper_speedup(random, symmetric),
        "speedup_first": speedup(random, symmetric, rule="first"),
        f"speedup_{CLAIM_RULE}": speedup(random, symmetric, rule=CLAIM_RULE),
        f"signed_{CLAIM_RULE}": signed_speedup(random, symmetric),
        "never_below": not (symmetric["loss"] < random["loss"].iloc[-1]).any(),
        "loss_gap": loss_gap(random, symmetric),
    }


def table1(logs: pd.DataFrame, paper: pd.DataFrame | None = None, horizon: int | None = None) -> pd.DataFrame:
    """Their Table 1 from their logs (cut at ``horizon`` if given): one row per depth and dataset, by their
    notebook's formula and by ours, with the paper's printed speed-up beside it when ``paper`` is given."""
    pairs = logs[logs["objective"] == "encoder"][["layers", "dataset"]].drop_duplicates()
    rows = [
        {"layers": layers, "dataset": dataset, **compare(logs, layers, dataset, horizon)}
        for layers, dataset in pairs.itertuples(index=False)
    ]
    table = pd.DataFrame(rows)
    if paper is not None:
        printed = paper[paper["init"] == ARM[AUTHORS].papers_name][["layers", "dataset", "speedup_percent"]]
        table = table.merge(printed.rename(columns={"speedup_percent": "speedup_printed"}), how="left")
    return table.sort_values(["layers", "dataset"], key=_paper_order).reset_index(drop=True)


def _paper_order(column: pd.Series) -> pd.Series:
    return column.map(DATASETS.index) if column.name == "dataset" else column


def counterparts(layers: int, objective: str, dataset: str, characters: bool) -> tuple[str, ...]:
    """The authors' datasets set beside a run of ours: their run of the same depth (4 or 12 layers) and
    objective (encoder) trained on the same kind of tokens, Jigsaw for word pieces, Wikipedia and
    RedPajama for characters, or only our own dataset where it is one of those."""
    if layers not in MODELS.values() or objective != "encoder":
        return ()
    theirs = CHARACTER_DATASETS if characters else WORD_PIECE_DATASETS
    return (dataset,) if dataset in theirs else theirs


def at_horizon(
    logs: pd.DataFrame, layers: int, objective: str, dataset: str, characters: bool, horizon: int
) -> dict[str, float]:
    """For a row of ours: each counterpart's notebook speed-up, our claim rule's, and the loss gap, on
    their logs cut at our ``horizon`` (floored to their 200-update grid), and the same at the end of their
    schedule (200,000 updates). Keys ``authors_<dataset>_{notebook,<rule>,gap}`` and
    ``authors_<dataset>_end_{notebook,<rule>,gap}``; empty where they have no counterpart or logged nothing
    by then."""
    found: dict[str, float] = {}
    if horizon < 2 * LOG_EVERY:
        return found
    for theirs in counterparts(layers, objective, dataset, characters):
        for tag, cut in (("", horizon), ("end_", None)):
            values = compare(logs, layers, theirs, cut)
            found |= {
                f"authors_{theirs}_{tag}notebook": values["speedup_notebook"],
                f"authors_{theirs}_{tag}{CLAIM_RULE}": values[f"speedup_{CLAIM_RULE}"],
                f"authors_{theirs}_{tag}gap": values["loss_gap"],
            }
    return found
