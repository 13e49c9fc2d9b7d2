"""Every table of the pipeline's report shown inline, sortable, with its caption: Snakemake's report opens an
HTML result in a frame and offers any other file only as a download, so each table is also written as a
page of its own (attngeom.report.table_formats.to_html). Checked in headless Chromium on a real report:
a tiny run of the workflow (one random control, two 4-step training runs) built up to Table S2 and
Table 1, then ``--report``."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from browser import CHROMIUM, Page
from pipeline_support import TINY_MODELS, run_snakemake, write_config
from training_fixtures import write_corpus

from attngeom.report.table_formats import Block, to_html, write_table

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium; CI installs it in .ci/run)"
)
TARGETS = ["results/tables/table_s2.html", "results/training/tables/table_1.html"]
RUN = dict(n_layers=2, hidden_size=32, n_heads=2, intermediate_size=64, seq_len=32, batch_size=4)
RUN |= dict(grad_accum=1, steps=4, warmup_steps=1, log_every=1, score_every=2, checkpoint_every=4)


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


@pytest.fixture
def page(report, tmp_path):
    opened = Page((report / "report.html").as_uri(), tmp_path / "profile")
    yield opened
    opened.close()


def open_result(page: Page, category: str, name: str) -> str:
    """Click ``category`` in the report's menu, then the eye of result ``name``; the id of the frame that
    shows it."""
    page.evaluate(
        f"[...document.querySelectorAll('a')].find(a => a.textContent.trim() === {category!r}).click()"
    )
    row = f"[...document.querySelectorAll('tr')].find(r => r.cells[0]?.textContent.trim().endsWith({name!r}))"
    page.evaluate(f"{row}.querySelector('a[iconname=eye]').click()")
    for _ in range(100):
        frames = [f for f in page.frames() if f"filename={name}" in f["url"]]
        if frames and page.evaluate("document.readyState", frame=frames[0]["id"]) == "complete":
            return frames[0]["id"]
        time.sleep(0.1)
    raise AssertionError(f"{name} is not shown in a frame")


def visible_rows(page: Page, frame: str) -> list[list[str]]:
    """The body rows of every table in the frame that the browser lays out (a box of non-zero size),
    as the text it renders."""
    script = """[...document.querySelectorAll('tbody tr')]
        .filter(r => r.getBoundingClientRect().height > 0 && r.checkVisibility())
        .map(r => [...r.cells].map(c => c.innerText.trim()))"""
    return page.evaluate(script, frame=frame)


@needs_chromium
@pytest.mark.slow
def test_every_table_of_the_report_is_a_page_it_shows_with_its_caption(page):
    results = page.evaluate("Object.values(results).map(r => [r.filename, r.mime_type, r.caption])")
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
    frame = open_result(page, "Tables", "table_s2.html")
    heading = page.evaluate("document.querySelector('h1').innerText", frame=frame)
    assert heading.startswith("Table S2")
    rows = visible_rows(page, frame)
    summary = pd.read_csv(report / "results" / "tables" / "summary.csv")
    displays = set(summary["display"])
    assert {row[0] for row in rows} == displays and len(displays) == 3  # the control and both runs
    trained = "[...document.querySelectorAll('table')].at(-1)"  # the block of the runs trained here
    order = f"[...{trained}.tBodies[0].rows].map(r => r.cells[3].innerText)"
    median = f"[...{trained}.tHead.rows[0].cells].find(c => c.innerText.startsWith('Median'))"
    page.evaluate(f"{median}.click()", frame=frame)
    ascending = page.evaluate(order, frame=frame)
    page.evaluate(f"{median}.click()", frame=frame)
    descending = page.evaluate(order, frame=frame)
    assert ascending == sorted(ascending, key=float) and descending == ascending[::-1]
    assert len(set(ascending)) == 2  # random and symmetric init differ after 4 steps: the sort is seen


@needs_chromium
@pytest.mark.slow
def test_table_1_rows_are_visible_in_the_report(page, report):
    frame = open_result(page, "Training", "table_1.html")
    assert page.evaluate("document.querySelector('h1').innerText", frame=frame).startswith("Table 1")
    rows = visible_rows(page, frame)
    table = pd.read_csv(report / "results" / "training" / "tables" / "table_1.csv")
    assert len(rows) == len(table) == 2
    assert sorted(row[2] for row in rows) == sorted(table["init"]) == ["random", "symmetric"]


def test_an_html_table_escapes_its_cells_keeps_its_notes_and_says_why_it_is_empty(tmp_path):
    hostile = pd.DataFrame({"Model": ["<script>alert(1)</script>", "a & b"], "Median": ["0.10", "0.20"]})
    page = to_html([Block(hostile, "Block <1>", ("note: x < y",))], "T & U", "caption <i>")
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<h1>T &amp; U</h1>" in page and "caption &lt;i&gt;" in page and "note: x &lt; y" in page
    write_table(hostile.iloc[0:0], tmp_path / "empty", "Empty", empty="No model was scored.")
    assert "<p>No model was scored.</p>" in (tmp_path / "empty.html").read_text()
    assert "<table" not in (tmp_path / "empty.html").read_text()


@needs_chromium
def test_a_column_sorts_by_its_leading_number_with_empty_cells_last(tmp_path):
    cells = ["1.24B", "22.7M", "", "> 300", "−0.5 ± [0.1, 0.2]", "not scored", "360k"]
    table = pd.DataFrame({"Name": [f"r{i}" for i in range(len(cells))], "Value": cells})
    (tmp_path / "t.html").write_text(to_html(table, "T"))
    page = Page((tmp_path / "t.html").as_uri(), tmp_path / "profile")
    try:
        header = "document.querySelectorAll('th')[1]"
        order = "[...document.querySelectorAll('tbody tr')].map(r => r.cells[1].textContent)"
        page.evaluate(f"{header}.click()")
        ascending = page.evaluate(order)
        page.evaluate(f"{header}.click()")
        descending = page.evaluate(order)
        state = page.evaluate(f"{header}.getAttribute('aria-sort')")
    finally:
        page.close()
    numbers = ["−0.5 ± [0.1, 0.2]", "> 300", "360k", "22.7M", "1.24B"]
    assert ascending == [*numbers, "not scored", ""]
    assert descending == [*numbers[::-1], "not scored", ""] and state == "descending"
