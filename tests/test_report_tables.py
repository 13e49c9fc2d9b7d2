"""Every table of the pipeline's report shown inline, sortable, with its caption: Snakemake's report opens an
HTML result in a frame and offers any other file only as a download, so each table is also written as a
page of its own (attngeom.tables.formats.to_html). Checked in headless Chromium (Playwright, browser.py)
on a real report: a tiny run of the workflow (one random control, two 4-step training runs) built up to
Table S2 and Table 1, then ``--report``."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from browser import CHROMIUM, chromium, keep_screenshot, new_page
from pipeline_support import TINY_MODELS, run_snakemake, write_config
from training_fixtures import write_corpus

from attngeom.tables.formats import Block, to_html, write_table

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium; CI installs it in .ci/run)"
)
TARGETS = ["results/tables/table_s2.html", "results/training/tables/table_1.html"]
RUN = dict(n_layers=2, hidden_size=32, n_heads=2, intermediate_size=64, seq_len=32, batch_size=4)
RUN |= dict(grad_accum=1, steps=4, warmup_steps=1, log_every=1, score_every=2, checkpoint_every=4)
VISIBLE_ROWS = """() => [...document.querySelectorAll('tbody tr')]
    .filter(r => r.getBoundingClientRect().height > 0 && r.checkVisibility())
    .map(r => [...r.cells].map(c => c.innerText.trim()))"""
"""The body rows of every table the browser lays out (a box of non-zero size), as the text it renders."""


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium; CI installs it in .ci/run)")
    work = tmp_path_factory.mktemp("report")
    config = write_config(work / "c.yaml", TINY_MODELS[:1])
    data = yaml.safe_load(config.read_text())
    data.pop("figures")  # its heatmap models are not in this run, and no figure is built
    defaults = {**RUN, "vocab_size": 300, "dataset": str(write_corpus(work, 200)), "device": "cpu"}
    runs = [{"name": f"enc-{init}", "objective": "encoder", "init": init} for init in ("random", "symmetric")]
    data["training"] = {"defaults": {**defaults, "threads": 1}, "runs": runs}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    run_snakemake("--cores", "2", *TARGETS, "--configfile", str(config), cwd=work)
    run_snakemake("--cores", "1", *TARGETS, "--configfile", str(config), "--report", "report.html", cwd=work)
    return work


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium; CI installs it in .ci/run)")
    with chromium() as opened:
        yield opened


@pytest.fixture
def page(report, browser, request, tmp_path):
    opened = new_page(browser, (report / "report.html").as_uri())
    yield opened
    keep_screenshot(request, opened, tmp_path)
    opened.context.close()


def open_result(page, category: str, name: str):
    """Click ``category`` in the report's menu, then the eye of result ``name``; the frame that shows it,
    once loaded."""
    from playwright.sync_api import expect

    page.locator("a").filter(has_text=re.compile(rf"^\s*{re.escape(category)}\s*$")).first.click()
    first_cell = page.locator("td").first.filter(has_text=re.compile(rf"{re.escape(name)}\s*$"))
    row = page.locator("tr").filter(has=first_cell)
    with page.expect_event(
        "framenavigated", predicate=lambda frame: f"filename={name}" in frame.url
    ) as shown:
        row.locator("a[iconname=eye]").click()
    frame = shown.value
    frame.wait_for_load_state()
    expect(frame.locator("h1")).to_be_visible()
    return frame


@needs_chromium
@pytest.mark.slow
def test_every_table_of_the_report_is_a_page_it_shows_with_its_caption(page):
    results = page.evaluate("() => Object.values(results).map(r => [r.filename, r.mime_type, r.caption])")
    by_name = {Path(name).name: (mime, caption) for name, mime, caption in results}
    tables = {Path(name).stem for name in by_name if name.endswith(".csv")}
    assert {"summary", "table_s2", "table_s3", "table_1", "claims", "official_comparison"} <= tables
    for table in tables:
        mime, caption = by_name[f"{table}.html"]
        assert mime == "text/html", table
        assert caption and caption == by_name[f"{table}.csv"][1], table  # the rule's caption, kept


@needs_chromium
@pytest.mark.slow
def test_table_s2_rows_are_visible_and_sort_by_a_clicked_column(page, report):
    from playwright.sync_api import expect

    frame = open_result(page, "Tables", "table_s2.html")
    assert frame.locator("h1").inner_text().startswith("Table S2")
    rows = frame.evaluate(VISIBLE_ROWS)
    summary = pd.read_csv(report / "results" / "tables" / "summary.csv")
    displays = set(summary["display"])
    assert {row[0] for row in rows} == displays and len(displays) == 3  # the control and both runs
    trained = frame.locator("table").last  # the block of the runs trained here
    median = trained.locator("thead th").filter(has_text=re.compile(r"^Median")).first
    order = trained.locator("tbody tr td:nth-child(4)")
    median.click()
    expect(median).to_have_attribute("aria-sort", "ascending")
    ascending = order.all_inner_texts()
    median.click()
    expect(median).to_have_attribute("aria-sort", "descending")
    descending = order.all_inner_texts()
    assert ascending == sorted(ascending, key=float) and descending == ascending[::-1]
    assert len(set(ascending)) == 2  # random and symmetric init differ after 4 steps: the sort is seen


@needs_chromium
@pytest.mark.slow
def test_table_1_rows_are_visible_in_the_report(page, report):
    frame = open_result(page, "Training", "table_1.html")
    assert frame.locator("h1").inner_text().startswith("Table 1")
    rows = frame.evaluate(VISIBLE_ROWS)
    table = pd.read_csv(report / "results" / "training" / "tables" / "table_1.csv")
    # each run a row of Table 1 as the paper shapes it (init the fifth column), then of the block of every
    # comparison beneath it (init the third)
    assert len(rows) == 2 * len(table) == 4
    paper, every_comparison = rows[: len(table)], rows[len(table) :]
    assert sorted(row[4] for row in paper) == sorted(table["init"]) == ["random", "symmetric"]
    assert sorted(row[2] for row in every_comparison) == ["random", "symmetric"]


def test_an_html_table_escapes_its_cells_keeps_its_notes_and_says_why_it_is_empty(tmp_path):
    hostile = pd.DataFrame({"Model": ["<script>alert(1)</script>", "a & b"], "Median": ["0.10", "0.20"]})
    page = to_html([Block(hostile, "Block <1>", ("note: x < y",))], "T & U", "caption <i>")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<h1>T &amp; U</h1>" in page and "caption &lt;i&gt;" in page and "note: x &lt; y" in page
    write_table(hostile.iloc[0:0], tmp_path / "empty", "Empty", empty="No model was scored.")
    assert "<p>No model was scored.</p>" in (tmp_path / "empty.html").read_text()
    assert "<table" not in (tmp_path / "empty.html").read_text()


@pytest.fixture
def open_file(browser, request, tmp_path):
    """Opens a local file in a page of its own; each page is kept as a screenshot if the test fails."""
    pages = []

    def opened(path: Path):
        pages.append(new_page(browser, path.as_uri()))
        return pages[-1]

    yield opened
    for page in pages:
        keep_screenshot(request, page, tmp_path)
        page.context.close()


@needs_chromium
def test_a_column_sorts_by_its_leading_number_with_empty_cells_last(tmp_path, open_file):
    from playwright.sync_api import expect

    cells = ["1.24B", "22.7M", "", "> 300", "−0.5 ± [0.1, 0.2]", "not scored", "360k"]
    table = pd.DataFrame({"Name": [f"r{i}" for i in range(len(cells))], "Value": cells})
    (tmp_path / "t.html").write_text(to_html(table, "T"))
    page = open_file(tmp_path / "t.html")
    header = page.locator("th").nth(1)
    order = page.locator("tbody tr td:nth-child(2)")
    header.click()
    expect(header).to_have_attribute("aria-sort", "ascending")
    ascending = [cell.text_content() for cell in order.all()]
    header.click()
    expect(header).to_have_attribute("aria-sort", "descending")
    descending = [cell.text_content() for cell in order.all()]
    numbers = ["−0.5 ± [0.1, 0.2]", "> 300", "360k", "22.7M", "1.24B"]
    assert ascending == [*numbers, "not scored", ""]
    assert descending == [*numbers[::-1], "not scored", ""]
