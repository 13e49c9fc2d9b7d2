"""The summary of every model (``tables/summary.csv``) as a page the pipeline's report shows inline: one
row per (model, stack), the medians and interquartile distances at three decimals, the reason beside a
model that was not scored. The CSV keeps every number at full precision."""

from __future__ import annotations

import pandas as pd

from ..artifacts import ARTIFACT
from ..tables.formats import number, parameters, to_html
from .summary import METRICS

CAPTION = (
    "One row per model and stack: the median over layers of each score of the layer form, and − / + the "
    "interquartile distances (median − 25th percentile, 75th percentile − median). A model that could not "
    "be scored keeps its row with the reason."
)


def summary_display(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary's rows as display strings."""
    columns = {
        "Model": summary["display"].where(summary["display"] != "", summary["model"]),
        "Stack": summary["stack"],
        "Role": summary["role"],
        "Status": summary["status"],
        "Layers": summary["n_layers"].map(lambda n: "" if pd.isna(n) else f"{int(n)}"),
        "Parameters": summary["n_params"].map(parameters),
    }
    for metric in METRICS:
        name = metric.capitalize()
        columns[f"{name} median"] = summary[f"{metric}_median"].map(lambda v: number(v, 3))
        columns[f"{name} −"] = summary[f"{metric}_minus"].map(lambda v: number(v, 3))
        columns[f"{name} +"] = summary[f"{metric}_plus"].map(lambda v: number(v, 3))
    columns["Reason not scored"] = summary["reason"]
    return pd.DataFrame(columns)


def summary_html(summary: pd.DataFrame) -> str:
    return to_html(summary_display(summary), ARTIFACT["summary"].title, CAPTION, "No model in this run.")
