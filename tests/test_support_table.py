"""The support table of the documentation site (docs/support.md) is the conformance run's and the registry's
(regenerate with `attngeom support-table docs/support.md`); the README only links to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from attngeom.architectures import REGISTRY
from attngeom.architectures.discovery.validated import conformance
from attngeom.architectures.support import END, START, counts, support_table, with_support_table
from attngeom.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_page_table_matches_registry_and_the_readme_links_to_it():
    page = (ROOT / "docs" / "support.md").read_text()
    assert page == with_support_table(page), (
        "docs/support.md table is stale: run attngeom support-table docs/support.md"
    )
    readme = (ROOT / "README.md").read_text()
    assert START not in readme and "(docs/support.md)" in readme


def test_table_has_one_row_per_model_type_and_states_the_counts():
    lines = support_table().splitlines()
    rows = [line for line in lines if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == sorted(set(REGISTRY) | set(conformance()))
    assert any("`cross`" in row for row in rows)
    c = counts()
    assert f"**{c['scored']} of the {c['attention']} model types" in lines[0]
    assert sum(" | table | " in r for r in rows) == c["table"]
    modules = sum(" | discovered (modules) | " in r for r in rows)
    assert sum(" | discovered | " in r for r in rows) + modules == c["discovered"]
    assert modules == c["modules"] and (modules > 0) == ("attention modules' own forward" in lines[0])


def test_a_stack_whose_attention_was_causal_is_marked_so():
    """Each stack is labelled by what its attention did (``causal_stacks``), the model by its objective:
    a dual encoder's causal text tower beside its bidirectional vision tower."""
    from attngeom.architectures.support import _row

    entry = {
        "status": "validated",
        "reason": "discovered",
        "stacks": ["text_model_encoder", "vision_model_encoder"],
        "modality": "multimodal",
        "objective": "bidirectional",
        "causal_stacks": ["text_model_encoder"],
    }
    row = _row("attngeom_dual", entry)
    assert "`text_model_encoder` (causal), `vision_model_encoder` |" in row and "| bidirectional |" in row


def test_section_is_replaced_in_place_and_text_without_it_is_refused():
    stale = f"# title\n\n{START}\n| old |\n{END}\n\n## after\n"
    fresh = with_support_table(stale)
    assert (
        fresh.startswith("# title\n\n") and fresh.endswith(f"{END}\n\n## after\n") and "| old |" not in fresh
    )
    assert with_support_table(fresh) == fresh
    for text in ("", "# x\n", f"# x\n{START}\n", f"{END}\n{START}\n"):
        with pytest.raises(ValueError, match="no <!-- support-table:start -->"):
            with_support_table(text)


def test_command_checks_and_rewrites(tmp_path, capsys):
    page = tmp_path / "support.md"
    page.write_text(f"# x\n{START}\nstale\n{END}\n")
    assert main(["support-table", "--check", str(page)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["support-table", str(page)]) == 0
    assert main(["support-table", "--check", str(page)]) == 0
    assert "stale" not in page.read_text() and not list(tmp_path.glob(".*.tmp*"))


@pytest.mark.parametrize(
    "args,message",
    [
        ([], None),  # no file named: argparse's usage error, nothing written
        (["README.md"], "holds no <!-- support-table:start --> ... <!-- support-table:end --> section"),
        (["--check", "README.md"], "holds no <!-- support-table:start -->"),
        (["docs/support.md"], "docs/support.md: no such file"),
        (["."], ".: no such file"),
    ],
)
def test_outside_the_repository_it_writes_nothing_and_says_why(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    Path("README.md").write_text("# another project\n")
    if message is None:
        with pytest.raises(SystemExit) as exit_:
            main(["support-table", *args])
        assert exit_.value.code == 2
    else:
        assert main(["support-table", *args]) == 2
        err = capsys.readouterr().err
        assert err == f"attngeom: error: {err.removeprefix('attngeom: error: ')}" and err.count("\n") == 1
        assert message in err
    assert Path("README.md").read_text() == "# another project\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


def test_a_look_at_one_type_prints_it_and_leaves_the_packaged_table_whole(tmp_path, monkeypatch, capsys):
    """`python -m attngeom.conformance.run --types NAME` (the docs' way to see one type's result) prints
    it; only OUT or --update write, and --update keeps the other types."""
    import json

    from attngeom.conformance import run

    packaged = tmp_path / "support.json"
    packaged.write_text(json.dumps({"transformers": "x", "types": {"other": {"status": "refused"}}}))
    before = packaged.read_text()
    monkeypatch.setattr(run, "SUPPORT_FILE", packaged)
    assert run.main(["--types", "falcon", "--jobs", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["types"]["falcon"]["status"] == "table"
    assert packaged.read_text() == before
    assert run.main(["--types", "falcon", "--jobs", "1", "--update"]) == 0
    assert set(json.loads(packaged.read_text())["types"]) == {"other", "falcon"}
    assert run.main(["--types", "falcon", "--jobs", "1", str(tmp_path / "one.json")]) == 0
    assert set(json.loads((tmp_path / "one.json").read_text())["types"]) == {"falcon"}
