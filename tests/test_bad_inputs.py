"""Issue 13, item 10: bad inputs are named exactly (timestamps at the date limits, UTF-16 without a
byte-order mark, symbolic link loops), all at once, and `--skip-bad` builds the rest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import knowtree
from knowtree.cli.app import app
from knowtree.errors import InputError
from knowtree.ingest import load_documents
from knowtree.ingest.chat import load_chat
from knowtree.testing.models import KeywordModel

runner = CliRunner()


@pytest.mark.parametrize("stamp", ["9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00"])
def test_a_timestamp_past_the_date_limits_is_an_error_naming_file_and_record(
    tmp_path: Path, stamp: str
) -> None:
    path = tmp_path / "overflow.jsonl"
    ok = {"role": "user", "content": "hello", "timestamp": "2024-01-01T10:00"}
    path.write_text(json.dumps(ok) + "\n" + json.dumps({**ok, "timestamp": stamp}) + "\n")
    with pytest.raises(InputError) as err:
        load_chat(path)
    assert err.value.path == str(path) and "line 2" in err.value.reason and "out of range" in err.value.reason
    result = runner.invoke(
        app, ["chat", "add", "ov", str(path), "--db", str(tmp_path / "o.db"), "-m", "keyword"]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0 and "line 2" in result.output


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_text(tmp_path: Path, codec: str) -> None:
    text = "Les réunions ont lieu le mardi.\nThe budget is 4,200 euros.\n"
    path = tmp_path / "notes.txt"
    path.write_bytes(text.encode(codec))  # no BOM
    [doc] = load_documents([str(path)])
    assert doc.text == text and doc.encoding == codec


def test_binary_with_zero_bytes_is_still_binary(tmp_path: Path) -> None:
    path = tmp_path / "blob.txt"
    path.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(InputError, match="binary"):
        load_documents([str(path)])


def test_a_symlink_loop_is_named_as_such(tmp_path: Path) -> None:
    loop = tmp_path / "loop.md"
    os.symlink(loop, loop)
    with pytest.raises(InputError) as err:
        load_documents([str(loop)])
    assert "symbolic link loop" in err.value.reason
    with pytest.raises(InputError, match="symbolic link loop"):
        load_chat(loop)
    # inside a folder too, next to a good file: named, not silently skipped
    (tmp_path / "good.md").write_text("fine\n")
    with pytest.raises(InputError) as err:
        load_documents([str(tmp_path)])
    assert "loop.md" in str(err.value) and "symbolic link loop" in str(err.value)


def folder_with_bad_files(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\nAlpha facts: the alpha code is 1234.\n")
    (docs / "b.md").write_text("# B\nBeta facts: the beta code is 5678.\n")
    (docs / "empty.md").write_text("")
    (docs / "blob.txt").write_bytes(b"\x00\x01\x02\x03" * 100)
    (docs / "latin.txt").write_bytes(b"\xff\xfe\x00\xd8")  # a UTF-16 BOM, then invalid UTF-16
    return docs


def test_every_bad_file_is_named_and_nothing_is_stored(tmp_path: Path) -> None:
    docs = folder_with_bad_files(tmp_path)
    db = tmp_path / "kb.db"
    with knowtree.open(db, model=KeywordModel()) as kt:
        with pytest.raises(InputError) as err:
            kt.build([str(docs)], tree="t")
        assert not kt.store.tree_exists("t")
    message = str(err.value)
    for name in ("empty.md", "blob.txt", "latin.txt"):
        assert name in message
    assert "a.md" not in message.replace("data.md", "") and "--skip-bad" in message


def test_skip_bad_builds_the_rest_and_reports_each_skipped_file(tmp_path: Path) -> None:
    docs = folder_with_bad_files(tmp_path)
    db = tmp_path / "kb.db"
    result = runner.invoke(
        app, ["build", str(docs), "--tree", "t", "--db", str(db), "-m", "keyword", "-q", "--skip-bad"]
    )
    assert result.exit_code == 0, result.output
    skipped = [line for line in result.output.splitlines() if line.startswith("skipped:")]
    assert len(skipped) == 3
    assert any("empty.md" in line and "empty" in line for line in skipped)
    assert any("blob.txt" in line and "binary" in line for line in skipped)
    assert "built tree 't': 2 document(s)" in result.output and "skipped 3 bad file(s)" in result.output
    with knowtree.open(db, model=KeywordModel()) as kt:
        assert sorted(Path(d.path).name for d in kt.store.documents("t")) == ["a.md", "b.md"]
