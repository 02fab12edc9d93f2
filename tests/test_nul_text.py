"""NUL characters in extracted text (pypdf emits '\\x00' for glyphs it cannot map; a text file may
hold a stray one) are dropped by the readers, so a document builds and stores the same text on both
backends (PostgreSQL's TEXT refuses NUL; `KNOWTREE_TEST_BACKEND=postgresql` runs these there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import knowtree
from knowtree.testing.models import KeywordModel
from pdf_maker import make_pdf


def _stored_texts(kt: Any, tree: str) -> list[str]:
    return [n.text for n in kt.store.load_nodes(tree).values()]


def test_a_pdf_whose_extraction_yields_nul_builds_without_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pypdf

    original = pypdf.PageObject.extract_text

    def with_nul(self: Any, *args: Any, **kwargs: Any) -> str:
        return original(self, *args, **kwargs).replace("Lisbon", "Lis\x00bon\x00")

    monkeypatch.setattr(pypdf.PageObject, "extract_text", with_nul)
    pdf = make_pdf(
        tmp_path / "launch.pdf",
        [["The launch happened in Lisbon on a sunny day.", "Alice approved the budget for it."],
         ["The second page talks about harbours and boats in Lisbon."]],
    )  # fmt: skip
    with knowtree.open(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build([str(pdf)], tree="t")
        texts = _stored_texts(kt, "t")
        assert any("Lisbon" in t for t in texts)
        assert not any("\x00" in t for t in texts)
        hits = kt.tree("t").retrieve("Where was the launch in Lisbon?", budget_tokens=200, embedder="hash")
        assert any("Lisbon" in h.text for h in hits)


def test_a_text_file_with_a_stray_nul_builds_without_it(tmp_path: Path) -> None:
    doc = tmp_path / "notes.md"  # UTF-16: a NUL byte in UTF-8 text marks a binary file (refused)
    doc.write_bytes(("# Notes\n\n" + "The budget was approved in Porto.\x00 " * 40 + "\n").encode("utf-16"))
    with knowtree.open(tmp_path / "kb.db", model=KeywordModel()) as kt:
        kt.build([str(doc)], tree="t")
        texts = _stored_texts(kt, "t")
        assert any("approved in Porto." in t for t in texts)
        assert not any("\x00" in t for t in texts)


def test_a_chat_message_with_a_nul_is_refused_on_every_backend(tmp_path: Path) -> None:
    from knowtree.errors import InputError

    with knowtree.open(tmp_path / "kb.db", model=KeywordModel()) as kt:
        mem = kt.memory("chat")
        with pytest.raises(InputError, match=r"message 1: 'content' holds a NUL character"):
            mem.add([{"role": "user", "content": "plans"}, {"role": "user", "content": "hello\x00 world"}])
        mem.add([{"role": "user", "content": "hello world"}])  # the store is fine; nothing was half-written
        assert [m["content"] for m in kt.store.load_messages("chat")] == ["hello world"]
