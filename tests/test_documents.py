"""Structured documents: PDF (outline, TOC, proposed structure), DOCX, HTML, Markdown headings;
page ranges, leaf budgets, bad PDFs, incremental rebuilds, removal, PageIndex export/import."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import knowtree
from knowtree.cli.app import app
from knowtree.errors import InputError
from knowtree.llm.base import Request
from knowtree.testing.models import FunctionModel, KeywordModel
from pdf_maker import encrypted, filler, make_pdf, with_outline

runner = CliRunner()


class Counting(FunctionModel):
    """KeywordModel's replies, requests counted by purpose, optional overrides by purpose."""

    def __init__(self, overrides: dict[str, Any] | None = None) -> None:
        self.keyword = KeywordModel()
        self.overrides = overrides or {}
        super().__init__(self._reply, id="counting")

    def _reply(self, request: Request) -> Any:
        if request.schema_name in self.overrides:
            value = self.overrides[request.schema_name]
            return value(request) if callable(value) else value
        return self.keyword.reply(request)

    def count(self, purpose: str) -> int:
        return sum(1 for r in self.requests if r.schema_name == purpose)

    def prompts(self, purpose: str) -> list[str]:
        return [r.messages[-1].content for r in self.requests if r.schema_name == purpose]


def titles_pages(tree: knowtree.core.Tree) -> dict[str, tuple[int | None, int | None]]:
    out = {}
    for n in tree.nodes.values():
        s = n.spans[0]
        out[n.meta.title] = (s.page_start, s.page_end)
    return out


def report_pdf(tmp_path: Path) -> Path:
    """Six pages: cover, two chapters (the second with two sections over three pages)."""
    pages = [
        ["Example Corp annual report 2021", "Cover page"],
        ["Chapter 1 Revenue", "Revenue was 42 million dollars in 2021.", *filler("revenue", 5)],
        ["Chapter 2 Costs", "Costs rose by five percent.", *filler("costs", 5)],
        ["2.1 Staff costs", "Staff costs were 12 million dollars.", *filler("staff", 5)],
        [*filler("staff", 8)],
        ["2.2 Rent", "Rent was 3 million dollars for the Oslo office.", *filler("rent", 5)],
    ]
    return make_pdf(tmp_path / "plain.pdf", pages)


# -- PDF with an outline ---------------------------------------------------------------------------
def test_pdf_outline_gives_sections_with_page_ranges_and_no_llm_call(tmp_path: Path) -> None:
    plain = report_pdf(tmp_path)
    pdf = with_outline(
        plain,
        tmp_path / "report.pdf",
        [
            ("Chapter 1 Revenue", 1, 1),
            ("Chapter 2 Costs", 1, 2),
            ("2.1 Staff costs", 2, 3),
            ("2.2 Rent", 2, 5),
        ],
    )
    model = Counting()
    with knowtree.open(tmp_path / "kb.db", model=model, describe=False) as kt:
        report = kt.build([str(pdf)], tree="r")
        tree = kt.tree("r")
        pages = titles_pages(tree)
    assert report.usage.calls == 0 and model.requests == []  # titles-only fast path
    assert pages["Chapter 1 Revenue"] == (2, 2)
    assert pages["Chapter 2 Costs"] == (3, 6)
    assert pages["2.1 Staff costs"] == (4, 5)
    assert pages["2.2 Rent"] == (6, 6)
    assert pages["report.pdf"] == (1, 6)
    assert pages["(front matter)"] == (1, 1)
    costs = next(n for n in tree.nodes.values() if n.meta.title == "Chapter 2 Costs")
    assert [tree.nodes[c].meta.title for c in costs.children] == [
        "Chapter 2 Costs (introduction)",
        "2.1 Staff costs",
        "2.2 Rent",
    ]
    leaf = next(n for n in tree.nodes.values() if n.meta.title == "2.2 Rent")
    assert leaf.is_leaf and "Oslo office" in leaf.text


def test_pdf_leaves_respect_the_page_budget(tmp_path: Path) -> None:
    plain = report_pdf(tmp_path)
    pdf = with_outline(
        plain, tmp_path / "report.pdf", [("Chapter 1 Revenue", 1, 1), ("Chapter 2 Costs", 1, 2)]
    )
    with knowtree.open(tmp_path / "kb.db", model=Counting(), describe=False, node_max_pages=1) as kt:
        kt.build([str(pdf)], tree="r")
        nodes = kt.tree("r").nodes
    leaves = [n for n in nodes.values() if n.is_leaf]
    assert all(n.spans[0].page_start == n.spans[0].page_end for n in leaves)
    costs = next(n for n in nodes.values() if n.meta.title == "Chapter 2 Costs")
    assert len(costs.children) == 4  # pages 3-6 split one page each
    assert [nodes[c].spans[0].page_start for c in costs.children] == [3, 4, 5, 6]
    # the split parts tile the section: no page lost
    assert costs.spans[0].page_start == 3 and costs.spans[0].page_end == 6


def test_pdf_leaves_respect_the_character_budget(tmp_path: Path) -> None:
    pdf = make_pdf(
        tmp_path / "long.pdf", [["Title page"], [f"Line {i} of a very long single page." for i in range(45)]]
    )
    with knowtree.open(tmp_path / "kb.db", model=Counting(), describe=False, node_max_chars=600) as kt:
        kt.build([str(pdf)], tree="r")
        nodes = kt.tree("r").nodes
    leaves = [n for n in nodes.values() if n.is_leaf]
    assert len(leaves) > 2
    assert max(len(n.text) for n in leaves) <= 600


# -- PDF without an outline: table of contents, then proposed structure -------------------------------
def toc_pdf(tmp_path: Path) -> Path:
    """Printed page numbers start after the cover and contents: printed page 1 is physical page 3."""
    pages = [
        ["Example Corp annual report 2021"],
        ["Table of Contents", "1 Overview 1", "2 Revenue 2", "3 Outlook 4"],
        ["1 Overview", "We make bicycles in Bergen.", *filler("overview", 4)],
        ["2 Revenue", "Revenue was 42 million dollars in 2021.", *filler("revenue", 4)],
        [*filler("revenue", 6)],
        ["3 Outlook", "We expect growth of ten percent.", *filler("outlook", 4)],
    ]
    return make_pdf(tmp_path / "toc.pdf", pages)


def test_pdf_table_of_contents_maps_printed_to_physical_pages(tmp_path: Path) -> None:
    model = Counting()
    with knowtree.open(tmp_path / "kb.db", model=model, describe=False) as kt:
        kt.build([str(toc_pdf(tmp_path))], tree="r")
        pages = titles_pages(kt.tree("r"))
        source = kt.store._query("SELECT source FROM doc_info WHERE tree = 'r'")[0][0]
    assert model.count("toc") == 1 and len(model.requests) == 1
    assert source == "toc"
    assert pages["1 Overview"] == (3, 3)
    assert pages["2 Revenue"] == (4, 5)
    assert pages["3 Outlook"] == (6, 6)


def test_pdf_toc_entry_on_the_wrong_page_is_repaired_or_dropped(tmp_path: Path) -> None:
    reply = {
        "is_toc": True,
        "entries": [
            {"title": "1 Overview", "page": 1, "level": 1},
            {"title": "2 Revenue", "page": 3, "level": 1},  # wrong: really printed page 2
            {"title": "3 Outlook", "page": 4, "level": 1},
            {"title": "9 Appendix", "page": 5, "level": 1},  # not in the document at all
        ],
    }
    with knowtree.open(tmp_path / "kb.db", model=Counting({"toc": reply}), describe=False) as kt:
        kt.build([str(toc_pdf(tmp_path))], tree="r")
        pages = titles_pages(kt.tree("r"))
    assert pages["2 Revenue"] == (4, 5)  # found one page before the wrong guess
    assert "9 Appendix" not in pages


def test_pdf_without_toc_uses_the_proposed_structure_verified_against_pages(tmp_path: Path) -> None:
    pages = [
        ["Bicycle maintenance notes"],
        ["Brakes", "Check the brake pads every month.", *filler("brakes", 3)],
        [*filler("brakes", 5)],
        ["Chains", "Oil the chain every week.", *filler("chains", 3)],
    ]
    pdf = make_pdf(tmp_path / "notes.pdf", pages)
    reply = {
        "sections": [
            {"title": "Brakes", "page": 2, "level": 1},
            {"title": "Chains", "page": 4, "level": 1},
            {"title": "Invented section", "page": 3, "level": 1},  # not on its page: dropped
        ]
    }
    model = Counting({"structure": reply})
    with knowtree.open(tmp_path / "kb.db", model=model, describe=False) as kt:
        kt.build([str(pdf)], tree="r")
        got = titles_pages(kt.tree("r"))
    assert model.count("toc") == 0 and model.count("structure") == 1
    assert got["Brakes"] == (2, 3)
    assert got["Chains"] == (4, 4)
    assert "Invented section" not in got


def test_pdf_structure_falls_back_to_page_windows_when_the_model_fails(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "x.pdf", [[f"page {i} text about item {i}"] for i in range(5)])
    model = Counting({"structure": "not json at all"})
    with knowtree.open(tmp_path / "kb.db", model=model, describe=False, node_max_pages=2) as kt:
        kt.build([str(pdf)], tree="r")
        got = titles_pages(kt.tree("r"))
    assert got["Pages 1-2"] == (1, 2) and got["Pages 5-5"] == (5, 5)


# -- bad PDFs ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["truncated", "encrypted", "garbage"])
def test_bad_pdf_gives_one_line_error_and_leaves_the_database_unchanged(tmp_path: Path, kind: str) -> None:
    good = report_pdf(tmp_path)
    db = tmp_path / "kb.db"
    with knowtree.open(db, model="keyword", describe=False) as kt:
        kt.build([str(good)], tree="t")
        before = kt.store._query("SELECT id, meta_json FROM nodes ORDER BY id")
        runs = kt.store._query("SELECT COUNT(*) FROM runs")[0][0]
    bad = tmp_path / "bad.pdf"
    if kind == "truncated":
        bad.write_bytes(good.read_bytes()[:400])
    elif kind == "encrypted":
        encrypted(good, bad)
    else:
        bad.write_bytes(b"%PDF-1.4\n" + bytes(range(256)) * 10)
    result = runner.invoke(
        app, ["build", str(good), str(bad), "--tree", "t", "--db", str(db), "--model", "keyword"]
    )
    assert result.exit_code == 1
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "bad.pdf" in lines[0]
    assert "Traceback" not in result.output
    with knowtree.open(db, model="keyword") as kt:
        assert kt.store._query("SELECT id, meta_json FROM nodes ORDER BY id") == before
        assert kt.store._query("SELECT COUNT(*) FROM runs")[0][0] == runs


def test_load_pdf_errors_name_the_file(tmp_path: Path) -> None:
    from knowtree.ingest.pdf import load_pdf

    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match=r"empty\.pdf: file is empty"):
        load_pdf(str(empty))
    blank = make_pdf(tmp_path / "blank.pdf", [[], []])
    with pytest.raises(InputError, match="no extractable text"):
        load_pdf(str(blank))


# -- DOCX, HTML, Markdown ------------------------------------------------------------------------------
def test_docx_headings_become_sections_with_paragraph_spans(tmp_path: Path) -> None:
    docx = pytest.importorskip("docx")
    d = docx.Document()
    d.add_heading("Handbook", level=1)
    d.add_paragraph("Welcome to the team.")
    d.add_heading("Holidays", level=2)
    d.add_paragraph("Everyone gets 25 days of holiday a year.")
    d.add_heading("Expenses", level=2)
    d.add_paragraph("Submit receipts within 30 days.")
    table = d.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "Taxi"
    table.rows[0].cells[1].text = "allowed"
    path = tmp_path / "handbook.docx"
    d.save(str(path))
    with knowtree.open(tmp_path / "kb.db", model=Counting(), describe=False) as kt:
        kt.build([str(path)], tree="h")
        nodes = kt.tree("h").nodes
    by_title = {n.meta.title: n for n in nodes.values()}
    holidays, expenses = by_title["Holidays"], by_title["Expenses"]
    assert holidays.is_leaf and "25 days" in holidays.text
    assert "Taxi\tallowed" in expenses.text
    assert (holidays.spans[0].line_start, holidays.spans[0].line_end) == (3, 4)
    assert expenses.spans[0].line_start == 5
    assert [nodes[c].meta.title for c in by_title["Handbook"].children] == [
        "Handbook (introduction)",
        "Holidays",
        "Expenses",
    ] or [nodes[c].meta.title for c in by_title["Handbook"].children] == ["Holidays", "Expenses"]
    # leaves of DOCX trees get metadata by default (auto = eager for unpaged documents)
    assert holidays.meta.summary


def test_html_headings_become_sections(tmp_path: Path) -> None:
    pytest.importorskip("bs4")
    html = """<html><head><title>x</title><style>p {color: red}</style></head><body>
    <h1>Guide</h1><p>An introduction to the guide for new riders of all ages.</p>
    <h2>Setup</h2><p>Install the <b>saddle</b> first.</p><ul><li>Then the pedals.</li></ul>
    <h2>Riding</h2><p>Keep both hands on the bar.</p><script>var x = 1;</script>
    </body></html>"""
    path = tmp_path / "guide.html"
    path.write_text(html, encoding="utf-8")
    with knowtree.open(tmp_path / "kb.db", model=Counting(), describe=False) as kt:
        kt.build([str(path)], tree="g")
        nodes = kt.tree("g").nodes
    by_title = {n.meta.title: n for n in nodes.values()}
    assert "Install the saddle first." in by_title["Setup"].text
    assert "Then the pedals." in by_title["Setup"].text
    assert "var x" not in "".join(n.text for n in nodes.values())
    assert [nodes[c].meta.title for c in by_title["Guide"].children] == [
        "Guide (introduction)",
        "Setup",
        "Riding",
    ]
    assert by_title["Riding"].spans[0].line_start == 6


MD = """# Guide

Intro line for the whole guide, which explains what the guide covers in general.

## Brakes

Check the brake pads every month and replace them when worn.

## Chains

Oil the chain every week with a light oil.

### Chain tools

Use a chain breaker to shorten the chain.

## Tyres

Pump the tyres to 4 bar before every long ride.
"""


def test_markdown_headings_only_on_request_and_the_core_build_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "guide.md"
    path.write_text(MD, encoding="utf-8")
    with knowtree.open(tmp_path / "kb.db", model=Counting()) as kt:
        kt.build([str(path)], tree="core")
        assert not kt.tree("core").root.meta.title  # chunk-based core tree
    with knowtree.open(tmp_path / "kb.db", model=Counting(), structure="headings", describe=False) as kt:
        kt.build([str(path)], tree="md")
        nodes = kt.tree("md").nodes
    by_title = {n.meta.title: n for n in nodes.values()}
    assert by_title["Brakes"].spans[0].line_start == 5
    assert by_title["Chain tools"].spans[0].line_start == 13
    chains = by_title["Chains"]
    assert [nodes[c].meta.title for c in chains.children] == ["Chains (introduction)", "Chain tools"] or [
        nodes[c].meta.title for c in chains.children
    ] == ["Chain tools"]


def whole_text_summary(request: Request) -> dict[str, Any]:
    text = request.messages[-1].content.split("<text>")[1].split("</text>")[0]
    return {
        "summary": " ".join(text.split()),
        "content_types": [],
        "critical_actions": [],
        "decisions": [],
        "noteworthy_events": [],
        "about": [],
    }


def test_reingesting_an_edited_markdown_file_pays_only_for_the_changed_section_and_its_ancestors(
    tmp_path: Path,
) -> None:
    path = tmp_path / "guide.md"
    path.write_text(MD, encoding="utf-8")
    db = tmp_path / "kb.db"
    first = Counting({"leaf_meta": whole_text_summary})
    with knowtree.open(db, model=first, structure="headings") as kt:
        kt.build([str(path)], tree="md")
        before = kt.tree("md").nodes
    leaves_before = sum(1 for n in before.values() if n.is_leaf)
    assert first.count("leaf_meta") == leaves_before

    unchanged = Counting({"leaf_meta": whole_text_summary})
    with knowtree.open(db, model=unchanged, structure="headings") as kt:
        report = kt.build([str(path)], tree="md")
    assert report.usage.calls == 0 and unchanged.requests == []

    path.write_text(MD.replace("Use a chain breaker", "Use a good chain breaker"), encoding="utf-8")
    second = Counting({"leaf_meta": whole_text_summary})
    with knowtree.open(db, model=second, structure="headings") as kt:
        report = kt.build([str(path)], tree="md")
        after = kt.tree("md").nodes
    # the changed leaf, then its ancestors with more than one child: Chains, Guide (the document
    # node has a single child and copies its metadata)
    assert second.count("leaf_meta") == 1
    assert "chain breaker" in second.prompts("leaf_meta")[0]
    assert second.count("branch_meta") == 2
    # the document's description reads its opening, which this short file's edit falls into
    assert second.count("describe") == 1
    assert report.usage.calls == 4 == len(second.requests)
    changed = set(after) - set(before)
    titles = sorted(after[i].meta.title for i in changed)
    assert titles == ["Chain tools", "Chains", "Guide", "guide.md"]
    # every other node kept its id and metadata
    for nid in set(after) & set(before):
        assert after[nid].meta == before[nid].meta


# -- collections, removal ------------------------------------------------------------------------------
def test_add_documents_to_a_collection_and_remove_one(tmp_path: Path) -> None:
    a = make_pdf(tmp_path / "alpha.pdf", [["Alpha Corp report 2020"], ["Revenue of Alpha was 5 million."]])
    b = make_pdf(tmp_path / "beta.pdf", [["Beta Inc report 2021"], ["Revenue of Beta was 9 million."]])
    db = tmp_path / "kb.db"
    with knowtree.open(db, model=Counting({"structure": {"sections": []}})) as kt:
        kt.build([str(a)], tree="c", meta={"company": "Alpha"})
        alpha_nodes = set(kt.tree("c").nodes)
        kt.build([str(b)], tree="c", add=True, meta={"company": "Beta"})
        tree = kt.tree("c")
        assert tree.info.documents == 2
        assert alpha_nodes - {kt.tree("c").root.id} <= set(tree.nodes) | {next(iter(alpha_nodes))}
        from knowtree.store.docinfo import doc_infos

        infos = {i.path: i for i in doc_infos(kt.store, "c")}
        assert infos[str(a)].meta["company"] == "Alpha" and infos[str(b)].meta["company"] == "Beta"
        assert infos[str(a)].description  # described at build time
    result = runner.invoke(app, ["rm", "c", "--doc", "beta.pdf", "--db", str(db)])
    assert result.exit_code == 0, result.output
    with knowtree.open(db, model="keyword") as kt:
        tree = kt.tree("c")
        files = {s.file for n in tree.nodes.values() for s in n.spans}
        assert files == {str(a)}
        assert tree.info.documents == 1
    result = runner.invoke(app, ["rm", "c", "--doc", "nothere.pdf", "--db", str(db)])
    assert result.exit_code == 1 and "no document" in result.output


# -- PageIndex export / import -------------------------------------------------------------------------
def test_export_pageindex_and_import_it_back(tmp_path: Path) -> None:
    plain = report_pdf(tmp_path)
    pdf = with_outline(
        plain,
        tmp_path / "report.pdf",
        [("Chapter 1 Revenue", 1, 1), ("Chapter 2 Costs", 1, 2), ("2.1 Staff costs", 2, 3)],
    )
    db = tmp_path / "kb.db"
    assert (
        runner.invoke(
            app, ["build", str(pdf), "--tree", "fin", "--db", str(db), "--model", "keyword", "-q"]
        ).exit_code
        == 0
    )
    result = runner.invoke(app, ["export", "fin", "--format", "pageindex", "--db", str(db)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)

    def walk(n: dict[str, Any]) -> Any:
        yield n
        for c in n.get("nodes", []):
            yield from walk(c)

    flat = [m for r in data["structure"] for m in walk(r)]
    assert flat and all(
        isinstance(n["start_index"], int) and n["start_index"] <= n["end_index"] for n in flat
    )
    by_title = {n["title"]: n for n in flat}
    assert (by_title["Chapter 2 Costs"]["start_index"], by_title["Chapter 2 Costs"]["end_index"]) == (3, 6)
    assert data["index"] == "page"
    exported = tmp_path / "tree.json"
    exported.write_text(result.output, encoding="utf-8")
    result = runner.invoke(app, ["import", str(exported), "--tree", "back", "--db", str(db)])
    assert result.exit_code == 0, result.output
    again = json.loads(runner.invoke(app, ["export", "back", "--db", str(db)]).output)

    def shape(d: dict[str, Any]) -> Any:
        return [
            (n["title"], n["start_index"], n["end_index"], n["summary"])
            for r in d["structure"]
            for n in walk(r)
        ]

    assert shape(again) == shape(data)
    bad = tmp_path / "bad.json"
    bad.write_text('{"nothing": 1}', encoding="utf-8")
    result = runner.invoke(app, ["import", str(bad), "--db", str(db)])
    assert result.exit_code == 1 and "bad.json" in result.output


def test_rebuilding_an_unchanged_pdf_makes_no_llm_call(tmp_path: Path) -> None:
    pdf = toc_pdf(tmp_path)
    db = tmp_path / "kb.db"
    args = ["build", str(pdf), "--tree", "r", "--db", str(db), "-m", "keyword", "-q"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0 and "2 LLM calls" in first.output  # the table of contents, the description
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "0 LLM calls" in again.output
    model = KeywordModel()
    with knowtree.open(db, model=model) as kt:
        report = kt.build([str(pdf)], tree="r")
    assert report.usage.calls == 0 and model.requests == []
    shown = runner.invoke(app, ["show", "r", "--db", str(db)]).output
    assert "(pp. 4-5)" in shown and "'2 Revenue'" in shown


def test_toc_heading_and_document_title_entries_are_not_sections(tmp_path: Path) -> None:
    reply = {
        "is_toc": True,
        "entries": [
            {"title": "Table of Contents", "page": None, "level": 1},
            {"title": "Example Corp", "page": None, "level": 2},
            {"title": "1 Overview", "page": 1, "level": 3},
            {"title": "2 Revenue", "page": 2, "level": 3},
            {"title": "3 Outlook", "page": 4, "level": 3},
        ],
    }
    with knowtree.open(tmp_path / "kb.db", model=Counting({"toc": reply}), describe=False) as kt:
        kt.build([str(toc_pdf(tmp_path))], tree="r")
        tree = kt.tree("r")
        top = [tree.nodes[c].meta.title for c in tree.root.children]
    assert top == ["(front matter)", "1 Overview", "2 Revenue", "3 Outlook"]


def test_a_toc_reply_of_cover_headings_only_is_not_trusted(tmp_path: Path) -> None:
    pages = [
        ["Example Corp", "FORM 10-K", "Table of Contents", "1 Overview 1", "2 Revenue 2", "3 Outlook 4"],
        ["1 Overview", "We make bicycles.", *filler("overview", 3)],
        ["2 Revenue", "Revenue was 42 million dollars.", *filler("revenue", 3)],
        [*filler("revenue", 6)],
        [*filler("outlook", 6)],
        [*filler("outlook", 6)],
    ]
    pdf = make_pdf(tmp_path / "cover.pdf", pages)
    headings_only = {
        "is_toc": True,
        "entries": [
            {"title": "Example Corp", "page": None, "level": 2},
            {"title": "FORM 10-K", "page": None, "level": 2},
        ],
    }
    proposed = {
        "sections": [
            {"title": "1 Overview", "page": 2, "level": 1},
            {"title": "2 Revenue", "page": 3, "level": 1},
        ]
    }
    model = Counting({"toc": headings_only, "structure": proposed})
    with knowtree.open(tmp_path / "kb.db", model=model, describe=False) as kt:
        kt.build([str(pdf)], tree="r")
        got = titles_pages(kt.tree("r"))
        source = kt.store._query("SELECT source FROM doc_info WHERE tree = 'r'")[0][0]
    assert model.count("toc") == 1 and model.count("structure") == 1
    assert source == "llm" and got["2 Revenue"] == (3, 6)
