"""Structure trees keep every character (issue 35, item 10).

A property test over generated heading layouts (any depth order, empty sections, text before the
first heading, very short and very long bodies, repeated titles) in Markdown, HTML, DOCX and PDF: the
leaves of the planned tree, in reading order, hold every non-whitespace character of the document's
extracted text exactly once, each leaf being the text at its span; and the extracted text holds every
character the generator wrote (the loaders drop nothing visible either).

Examples are capped so the file runs in seconds; under CI (`CI` set) they are derandomized.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from knowtree.cli.app import app
from knowtree.construct.structure import StructureOptions, plan_structure
from knowtree.construct.toc import page_windows
from knowtree.ingest.markdown import markdown_sections
from knowtree.ingest.structure import StructuredDocument, make_document
from knowtree.types import NodeKind
from pdf_maker import make_pdf


def bounded(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=bool(os.environ.get("CI")),
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# -- generated layouts --------------------------------------------------------------------------------
TITLES = ["Notes", "Alpha", "Beta", "Beta risks", "Setup", "Notes"]  # repeated on purpose
WORDS = ["Carol", "owns", "the", "queue", "port", "8443", "on", "May", "x", "legacy", "risk"]


@dataclass(frozen=True)
class Head:
    level: int
    title: str


@dataclass(frozen=True)
class Para:
    text: str
    form: int  # how a loader sees it: HTML wrapper, DOCX paragraph or table, blank line or not


def _body(words: list[str], times: int) -> str:
    return " ".join(words * times)


HEADS = st.builds(Head, st.integers(1, 6), st.sampled_from(TITLES))
# very short (one word) to very long (thousands of characters: split into parts)
PARAS = st.builds(
    Para,
    st.builds(_body, st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), st.sampled_from([1, 1, 2, 9, 120])),
    st.integers(0, 4),
)
LAYOUTS = st.lists(st.one_of(HEADS, PARAS, PARAS), min_size=1, max_size=14)
OPTIONS = StructureOptions(max_chars=500, max_children=3)  # small: parts and groups get exercised


def nonspace(text: str) -> str:
    return "".join(text.split())


def written(layout: list[Head | Para], *, tables: bool = True) -> str:
    """Every character the generator put in the document, in order (a table row, form 4, holds the
    text twice: two cells)."""
    out = []
    for b in layout:
        if isinstance(b, Head):
            out.append(b.title)
        else:
            out.append(b.text * (2 if b.form == 4 and tables else 1))
    return nonspace("".join(out))


def assert_leaves_cover(sd: StructuredDocument) -> None:
    plans, _ = plan_structure([sd], OPTIONS)
    leaves = sorted((p for p in plans if p.kind is NodeKind.LEAF), key=lambda p: p.span.start)  # type: ignore[union-attr]
    text = sd.document.text
    for p in leaves:
        assert p.span is not None and text[p.span.start : p.span.end] == p.text
    # every non-whitespace character in exactly one leaf, in reading order: nothing dropped or doubled
    assert "".join(nonspace(p.text) for p in leaves) == nonspace(text)


# -- Markdown -----------------------------------------------------------------------------------------
def markdown(layout: list[Head | Para]) -> str:
    parts = []
    for b in layout:
        line = f"{'#' * b.level} {b.title}" if isinstance(b, Head) else b.text
        parts.append(line + ("\n" if isinstance(b, Para) and b.form % 2 else "\n\n"))
    return "".join(parts)


@bounded(60)
@given(LAYOUTS)
def test_markdown_structure_leaves_hold_every_character(layout: list[Head | Para]) -> None:
    sd = markdown_sections(make_document("doc.md", markdown(layout)))
    assert_leaves_cover(sd)
    assert nonspace(sd.document.text).replace("#", "") == written(layout, tables=False)


# -- HTML ---------------------------------------------------------------------------------------------
def html(layout: list[Head | Para]) -> str:
    forms = ["<p>{}</p>", "<div>{}</div>", "{}", "<ul><li>{}</li></ul>", "<table><tr><td>{}</td><td>{}</td></tr></table>"]
    parts = ["<html><head><title>t</title><style>p {color: red}</style></head><body>"]
    for b in layout:
        if isinstance(b, Head):
            parts.append(f"<h{b.level}>{b.title}</h{b.level}>")
        else:
            parts.append(forms[b.form].format(b.text, b.text))
        parts.append("\n")
    parts.append("<!-- a comment --><script>var hidden = 1;</script></body></html>")
    return "".join(parts)


@bounded(40)
@given(LAYOUTS)
def test_html_structure_leaves_hold_every_character(layout: list[Head | Para]) -> None:
    pytest.importorskip("bs4")
    from knowtree.ingest.html import load_html

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "doc.html"
        path.write_text(html(layout), encoding="utf-8")
        sd = load_html(str(path))
    assert_leaves_cover(sd)
    assert nonspace(sd.document.text) == written(layout)


# -- DOCX ---------------------------------------------------------------------------------------------
@bounded(25)
@given(LAYOUTS)
def test_docx_structure_leaves_hold_every_character(layout: list[Head | Para]) -> None:
    docx = pytest.importorskip("docx")
    from knowtree.ingest.docx import load_docx

    d = docx.Document()
    for b in layout:
        if isinstance(b, Head):
            d.add_heading(b.title, level=b.level)
        elif b.form == 4:
            row = d.add_table(rows=1, cols=2).rows[0]
            row.cells[0].text = row.cells[1].text = b.text
        else:
            d.add_paragraph(b.text)
            if b.form == 3:
                d.add_paragraph("")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "doc.docx"
        d.save(str(path))
        sd = load_docx(str(path))
    assert_leaves_cover(sd)
    assert nonspace(sd.document.text) == written(layout)


# -- PDF (with an outline of any depth) ---------------------------------------------------------------
def pdf(layout: list[Head | Para], breaks: list[bool], path: Path) -> Path:
    from pypdf import PdfReader, PdfWriter

    pages: list[list[str]] = [[]]
    heads: list[tuple[Head, int]] = []
    for b, new_page in zip(layout, breaks, strict=False):
        if new_page and pages[-1]:
            pages.append([])
        if isinstance(b, Head):
            heads.append((b, len(pages) - 1))
            pages[-1].append(b.title)
        else:
            text = b.text * (2 if b.form == 4 else 1)
            pages[-1].extend(text[i : i + 90] for i in range(0, len(text), 90))
    plain = path.with_suffix(".plain.pdf")
    make_pdf(plain, pages)
    writer = PdfWriter(clone_from=PdfReader(str(plain)))
    open_items: list[tuple[int, object]] = []  # (level, outline item): the parent chain
    for h, page in heads:
        while open_items and open_items[-1][0] >= h.level:
            open_items.pop()
        parent = open_items[-1][1] if open_items else None
        open_items.append((h.level, writer.add_outline_item(title=h.title, page_number=page, parent=parent)))
    with open(path, "wb") as f:
        writer.write(f)
    return path


@bounded(25)
@given(LAYOUTS, st.lists(st.booleans(), min_size=14, max_size=14))
def test_pdf_structure_leaves_hold_every_character(layout: list[Head | Para], breaks: list[bool]) -> None:
    from knowtree.ingest.pdf import load_pdf

    if len(written(layout)) < 20:  # a PDF needs some text to be read at all
        layout = [Para("a first line long enough to read", 0), *layout]
    with tempfile.TemporaryDirectory() as tmp:
        sd = load_pdf(str(pdf(layout, breaks, Path(tmp) / "doc.pdf")))
    assert sd.source == "outline" or not any(isinstance(b, Head) for b in layout)
    assert_leaves_cover(sd)
    assert nonspace(sd.document.text) == written(layout)
    # the structure of last resort for a PDF without outline or contents: fixed page windows
    sd.sections, sd.source = page_windows(sd, 1), "pages"
    assert_leaves_cover(sd)


# -- the reported case, end to end --------------------------------------------------------------------
NOTES = (
    "# Notes\n\n## Alpha\n\nAlpha launched on 3 May.\n\n## Beta\n\nBeta is owned by Carol.\n\n"
    "### Beta risks\n\nBeta depends on the legacy queue.\n"
)


def test_a_short_section_opening_is_a_leaf_and_found_by_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KNOWTREE_MODEL", "keyword")
    Path("notes.md").write_text(NOTES, encoding="utf-8")
    cli = CliRunner()
    built = cli.invoke(app, ["build", "notes.md", "--tree", "md", "--structure", "headings", "--db", "md.db"])
    assert built.exit_code == 0, built.output
    shown = json.loads(cli.invoke(app, ["show", "md", "--json", "--db", "md.db"]).stdout)
    in_order = sorted((n for n in shown["nodes"] if not n["children"]), key=lambda n: n["spans"][0]["start"])
    leaves = {n["meta"]["title"]: n["text"] for n in in_order}
    assert "Carol" in leaves["Beta (introduction)"]
    # a heading with nothing under it but subsections opens its first subsection's leaf
    assert leaves["Alpha"].startswith("# Notes") and "3 May" in leaves["Alpha"]
    assert "".join(nonspace(t) for t in leaves.values()) == nonspace(NOTES)
    found = cli.invoke(
        app, ["ask", "md", "Who is Carol?", "--mode", "retrieve", "--no-answer", "--db", "md.db", "--json"]
    )
    assert found.exit_code == 0, found.output
    assert "Carol" in found.stdout


def test_html_section_opening_and_loose_text_are_kept(tmp_path: Path) -> None:
    pytest.importorskip("bs4")
    from knowtree.ingest.html import load_html

    path = tmp_path / "c.html"
    path.write_text(
        "<h2>Configure</h2><p>Set the port to 8443.</p><h3>TLS</h3><p>Use TLS 1.3.</p>"
        "<div>Loose text in a div.</div>after the div<br>a line<span> and a span</span>",
        encoding="utf-8",
    )
    sd = load_html(str(path))
    plans, _ = plan_structure([sd], StructureOptions())
    leaves = {p.title: p.text for p in plans if p.kind is NodeKind.LEAF}
    assert leaves["Configure (introduction)"] == "Configure\nSet the port to 8443."
    assert leaves["TLS"].endswith("Loose text in a div.\nafter the div\na line and a span")
