"""Knowledge-base inputs holding a NUL character are refused naming the file and line (PostgreSQL's
TEXT cannot store one, and a record's text is stored as given, so it is not silently changed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowtree.errors import InputError
from knowtree.ingest.kb_inputs import load_kb_docs, load_raw_issues


def test_an_escaped_nul_in_a_jsonl_issue_is_refused_with_its_line(tmp_path: Path) -> None:
    f = tmp_path / "issues.jsonl"
    f.write_text('{"text": "the TV has no sound"}\n{"text": "no picture\\u0000 at all"}\n', encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_raw_issues(f)
    assert str(f) in str(e.value) and "line 2" in str(e.value) and "NUL" in str(e.value)


def test_a_raw_nul_byte_in_a_csv_is_refused_with_its_line(tmp_path: Path) -> None:
    f = tmp_path / "issues.csv"
    f.write_bytes(b"id,text\n1,no sound\n2,no pic\x00ture\n")
    with pytest.raises(InputError) as e:
        load_raw_issues(f)
    assert "line 3" in str(e.value) and "NUL" in str(e.value)


def test_a_nul_in_a_nested_value_of_a_document_record_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "docs.jsonl"
    f.write_text('{"text": "reset the set", "tags": ["a", "b\\u0000"]}\n', encoding="utf-8")
    with pytest.raises(InputError, match="line 1"):
        load_kb_docs([str(f)])


def test_clean_inputs_still_load(tmp_path: Path) -> None:
    f = tmp_path / "issues.jsonl"
    f.write_text('{"text": "the TV has no sound"}\n', encoding="utf-8")
    assert [i.text for i in load_raw_issues(f)] == ["the TV has no sound"]
