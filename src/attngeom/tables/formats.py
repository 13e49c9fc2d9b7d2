"""A table written four ways: ``stem``.csv at full precision; ``stem``.md, ``stem``.tex and ``stem``.html
(a sortable page of its own, what the pipeline's report shows inline) with the title, the caption and the
grid, or each block of it under its heading; and the cell formats they share."""

from __future__ import annotations

import html
import os
from dataclasses import dataclass

import pandas as pd

from ..files import write_text
from . import html_page

LIST_SEPARATOR = ","
"""A cell holding a list (a model's ``groups``) is written comma-joined in a CSV: readable by a person."""


def csv_text(table: pd.DataFrame) -> str:
    """``table`` as CSV text, without the index, every list cell comma-joined."""
    listed = [c for c in table.columns if any(isinstance(v, list | tuple) for v in table[c])]
    joined = {
        c: table[c].map(lambda v: LIST_SEPARATOR.join(v) if isinstance(v, list | tuple) else v)
        for c in listed
    }
    return table.assign(**joined).to_csv(index=False)


def write_csv(table: pd.DataFrame, path: str | os.PathLike) -> None:
    """``table`` as a CSV file (``csv_text``)."""
    write_text(path, csv_text(table))


def number(value: float, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals; '' when missing."""
    return "" if pd.isna(value) else f"{value:.{digits}f}"


def parameters(value: float) -> str:
    """A parameter count as people write it: 22.7M, 1.24B; '' when unknown."""
    if pd.isna(value):
        return ""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.0f}"


@dataclass(frozen=True)
class Block:
    """One grid of a table file, under its own heading (empty: none), with notes printed below it."""

    table: pd.DataFrame
    heading: str = ""
    notes: tuple[str, ...] = ()


def _markdown_grid(table: pd.DataFrame) -> list[str]:
    """The table as GitHub Markdown (pandas' ``to_markdown``, through tabulate), every cell as the text it
    holds (no number re-formatted) and its ``|`` escaped."""
    cells = table.astype(str).apply(lambda col: col.str.replace("|", "\\|", regex=False))
    cells.columns = [str(c).replace("|", "\\|") for c in table.columns]
    return cells.to_markdown(index=False, tablefmt="github", disable_numparse=True).splitlines()


def to_markdown(table: pd.DataFrame | list[Block], title: str, caption: str = "") -> str:
    """A GitHub Markdown heading, the caption, then the table (or each block under its own heading)."""
    blocks = table if isinstance(table, list) else [Block(table)]
    lines = [f"# {title}", ""] + ([caption, ""] if caption else [])
    for block in blocks:
        lines += [f"## {block.heading}", ""] if block.heading else []
        lines += [*_markdown_grid(block.table), ""]
        lines += [*(f"- {note}" for note in block.notes), ""] if block.notes else []
    return "\n".join(lines).rstrip("\n") + "\n"


_LATEX_SPECIALS = {c: "\\" + c for c in "&%$#_{}"} | {
    "~": r"\textasciitilde{}",
    "^": r"\^{}",
    "\\": r"\textbackslash{}",
}


def _latex_escape(text: str) -> str:
    """``text`` for a caption, heading or note (the grid's cells are escaped by pandas' Styler)."""
    return "".join(_LATEX_SPECIALS.get(c, c) for c in text).replace("±", r"$\pm$")


def _latex_grid(table: pd.DataFrame) -> list[str]:
    """The table as a booktabs ``tabular`` (pandas' ``Styler.to_latex``), every cell as the text it holds,
    escaped for LaTeX, its ``±`` in math mode."""
    plus_minus = {"formatter": lambda text: str(text).replace("±", r"$\pm$"), "escape": "latex"}
    styled = table.astype(str).style.hide(axis="index").format(**plus_minus)
    styled = styled.format_index(axis=1, **plus_minus)
    return styled.to_latex(column_format="l" * len(table.columns), hrules=True).splitlines()


def to_latex(table: pd.DataFrame | list[Block], title: str, caption: str = "") -> str:
    """A booktabs ``table`` environment captioned with the title and caption; blocks one tabular each,
    under a bold heading, their notes below."""
    blocks = table if isinstance(table, list) else [Block(table)]
    lines = [
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{_latex_escape(f'{title}. {caption}' if caption else title)}}}",
    ]
    for i, block in enumerate(blocks):
        lines += [r"\medskip"] if i else []
        lines += [rf"\textbf{{{_latex_escape(block.heading)}}}\\[2pt]"] if block.heading else []
        lines += _latex_grid(block.table)
        lines += [rf"\\[2pt]{{\footnotesize {_latex_escape(note)}}}" for note in block.notes]
    return "\n".join([*lines, r"\end{table}", ""])


def _cell(value: object) -> str:
    return "" if pd.api.types.is_scalar(value) and pd.isna(value) else str(value)


def to_html(table: pd.DataFrame | list[Block], title: str, caption: str = "", empty: str = "") -> str:
    """A page of its own (``html_page``): the title, the caption, then the table, or each block under its
    heading with its notes below, every grid sortable by any column; a table without rows says ``empty``."""
    blocks = [b for b in (table if isinstance(table, list) else [Block(table)]) if not b.table.empty]
    body = [] if blocks else [f"<p>{html.escape(empty)}</p>"]
    for block in blocks:
        body += [f"<h2>{html.escape(block.heading)}</h2>"] if block.heading else []
        cells = [[_cell(v) for v in row] for row in block.table.itertuples(index=False)]
        body += html_page.grid(cells, [str(c) for c in block.table.columns])
        notes = [f"<li>{html.escape(note)}</li>" for note in block.notes]
        body += ['<ul class="notes">', *notes, "</ul>"] if notes else []
    return html_page.page(title, caption, body)


def write_table(
    table: pd.DataFrame | list[Block],
    stem: str | os.PathLike,
    title: str,
    csv: pd.DataFrame | None = None,
    empty: str = "This table has no rows.",
    caption: str = "",
) -> None:
    """``stem``.csv (``csv`` if given: full precision), ``stem``.md, ``stem``.tex and ``stem``.html: the
    title, the caption (what the table shows, what its ± means), then the table, or each of its blocks
    under its heading. A table without rows is still a CSV with its header, and the others say ``empty``
    (one sentence: why) instead of a grid."""
    stem = str(stem)
    if csv is None and isinstance(table, list):
        raise ValueError("a table in blocks needs its full-precision csv")
    write_csv(table if csv is None else csv, stem + ".csv")
    blocks = [b for b in (table if isinstance(table, list) else [Block(table)]) if not b.table.empty]
    write_text(stem + ".html", to_html(blocks, title, caption, empty))
    if not blocks:
        write_text(stem + ".md", f"# {title}\n\n{empty}\n" + (f"\n{caption}\n" if caption else ""))
        write_text(stem + ".tex", f"% {_latex_escape(title)}\n{_latex_escape(' '.join([empty, caption]))}\n")
        return
    write_text(stem + ".md", to_markdown(blocks, title, caption))
    write_text(stem + ".tex", to_latex(blocks, title, caption))
