"""A table's self-contained HTML page: what Snakemake's report shows inline (it opens an HTML result in a
frame and offers any other file, CSV, Markdown or LaTeX, only as a download).

The page carries its own style and a short script that sorts a table by the column whose header is
clicked (again: the other way). A cell sorts by its leading number where it has one (``22.7M`` as 22.7
million, ``0.42 ± [0.01, 0.03]`` as 0.42, ``> 300`` as 300), else by its text; empty cells go last.
Nothing is fetched: the page works offline and inside the report's single file.
"""

from __future__ import annotations

import html

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1b1b1b; margin: 1.2em; }
h1 { font-size: 1.25em; margin: 0 0 .4em; }
h2 { font-size: 1.05em; margin: 1.4em 0 .4em; }
p.caption { max-width: 60em; color: #333; }
table.sortable { border-collapse: collapse; margin: .4em 0; }
table.sortable th, table.sortable td { padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: left; }
table.sortable th { cursor: pointer; user-select: none; background: #f3f3f3; position: sticky; top: 0; }
table.sortable th[aria-sort="ascending"]::after { content: " ▲"; }
table.sortable th[aria-sort="descending"]::after { content: " ▼"; }
table.sortable tbody tr:nth-child(even) { background: #fafafa; }
ul.notes { color: #444; }
"""

SCRIPT = r"""
(function () {
  var SCALE = {k: 1e3, K: 1e3, M: 1e6, B: 1e9};
  function key(text) {
    text = text.trim();
    if (text === "") return [2, 0, ""];
    var m = text.replace(/\u2212/g, "-").match(/^[>< ≥≤~]*([-+]?\d*\.?\d+(?:e[-+]?\d+)?)\s*([kKMB](?![a-z]))?/);
    if (m) return [0, parseFloat(m[1]) * (m[2] ? SCALE[m[2]] : 1), text];
    return [1, 0, text];
  }
  function compare(a, b, descending) {
    if (a[0] !== b[0]) return a[0] - b[0];  // numbers, then text, then empty cells, either way
    var order = a[0] === 0 && a[1] !== b[1] ? a[1] - b[1] : a[2].localeCompare(b[2], undefined, {numeric: true});
    return descending ? -order : order;
  }
  function sortBy(table, header, column) {
    var descending = header.getAttribute("aria-sort") === "ascending";
    table.querySelectorAll("th").forEach(function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (row, i) {
      return {row: row, i: i, key: key(row.cells[column] ? row.cells[column].textContent : "")};
    });
    rows.sort(function (a, b) { return compare(a.key, b.key, descending) || a.i - b.i; });
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("thead th").forEach(function (th, column) {
      th.tabIndex = 0;
      th.title = "sort by this column";
      th.addEventListener("click", function () { sortBy(table, th, column); });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortBy(table, th, column); }
      });
    });
  });
})();
"""


def page(title: str, caption: str, body: list[str]) -> str:
    """A whole HTML document: the title as its heading, the caption under it, then ``body`` (HTML)."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        '<head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{STYLE}</style></head>",
        "<body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    head += [f'<p class="caption">{html.escape(caption)}</p>'] if caption else []
    return "\n".join([*head, *body, f"<script>{SCRIPT}</script>", "</body>", "</html>", ""])


def grid(cells: list[list[str]], columns: list[str]) -> list[str]:
    """One sortable table: ``columns`` as its header, ``cells`` (text) its rows, every cell escaped."""
    header = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in columns)
    rows = ["<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in cells]
    return [
        '<table class="sortable">',
        f"<thead><tr>{header}</tr></thead>",
        "<tbody>",
        *rows,
        "</tbody>",
        "</table>",
    ]
