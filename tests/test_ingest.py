"""Tests for knowtree.ingest: expansion of paths, validation, decoding, normalization."""

from __future__ import annotations

import codecs
import hashlib
import os
import random
from pathlib import Path

import pytest

from knowtree.errors import InputError
from knowtree.ingest import SUPPORTED_SUFFIXES, load_documents

FRENCH = "Café déjà vu, naïve façade. " * 50
SPANISH = "El niño comió una manzana en el jardín. La señora García está en la ciudad. " * 5


def write(path: Path, data: bytes | str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return str(path)


def load_one(path: str, **kwargs: int) -> tuple[str, str]:
    (doc,) = load_documents([path], **kwargs)
    return doc.text, doc.encoding


def reject(paths: list[str], **kwargs: int) -> InputError:
    with pytest.raises(InputError) as info:
        load_documents(paths, **kwargs)
    return info.value


# --- decoding -------------------------------------------------------------------------------------


def test_utf8_file(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "héllo wörld — ünïcode ✓\n")
    (doc,) = load_documents([path])
    assert doc.path == path
    assert doc.text == "héllo wörld — ünïcode ✓\n"
    assert doc.encoding == "utf-8"
    assert doc.sha256 == hashlib.sha256(doc.text.encode("utf-8")).hexdigest()


def test_utf8_bom_is_stripped(tmp_path: Path) -> None:
    path = write(tmp_path / "a.md", codecs.BOM_UTF8 + "# Titre\n\nçà\n".encode())
    text, encoding = load_one(path)
    assert text == "# Titre\n\nçà\n"
    assert encoding == "utf-8-sig"


@pytest.mark.parametrize("sample", [FRENCH, SPANISH])
def test_cp1252_is_detected(tmp_path: Path, sample: str) -> None:
    path = write(tmp_path / "legacy.txt", sample.encode("cp1252"))
    text, encoding = load_one(path)
    assert text == sample
    assert encoding == "cp1252"


def test_cyrillic_cp1251_is_detected(tmp_path: Path) -> None:
    sample = "Привет, как дела? Это тестовый текст на русском языке. " * 10
    path = write(tmp_path / "ru.txt", sample.encode("cp1251"))
    text, _ = load_one(path)
    assert text == sample


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_bom(tmp_path: Path, codec: str) -> None:
    raw = "héllo\r\nwörld ✓\n".encode(codec)
    if codec == "utf-16-be":
        raw = codecs.BOM_UTF16_BE + raw
    path = write(tmp_path / "wide.txt", raw)
    text, encoding = load_one(path)
    assert text == "héllo\nwörld ✓\n"
    assert encoding in ("utf-16", "utf-32")


def test_bom_followed_by_odd_data_does_not_crash(tmp_path: Path) -> None:
    path = write(tmp_path / "odd.txt", b"\xff\xfe\x00bad")
    try:
        docs = load_documents([path])
    except InputError as e:
        assert e.path == path
    else:
        assert len(docs) == 1 and docs[0].path == path


def test_bom_followed_by_invalid_data_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path / "odd.txt", b"\xff\xfe\x00bad\n")  # odd length: not UTF-16
    err = reject([path])
    assert err.path == path
    assert "cannot be decoded as text" in err.reason


def test_random_binary_is_rejected(tmp_path: Path) -> None:
    blob = random.Random(7).randbytes(4096)
    path = write(tmp_path / "blob.txt", blob)
    err = reject([path])
    assert err.path == path
    assert err.reason == "looks like a binary file, not text"


def test_binary_without_nul_bytes_is_rejected(tmp_path: Path) -> None:
    blob = random.Random(8).randbytes(4096).replace(b"\x00", b"\x01")
    path = write(tmp_path / "blob.txt", blob)
    err = reject([path])
    assert err.path == path
    assert err.reason in (
        "looks like a binary file, not text",
        "cannot be decoded as text (tried utf-8 and charset detection)",
    )


def test_urandom_blob_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path / "blob.bin", os.urandom(4096))
    err = reject([path])
    assert err.path == path


def test_nul_bytes_mean_binary(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"plain text\x00with a nul byte\n" * 10)
    assert reject([path]).reason == "looks like a binary file, not text"


# --- content checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content", [b"", b"   \n\t\r\n  ", codecs.BOM_UTF8 + b"\n\n", " \n".encode("utf-16")]
)
def test_empty_and_whitespace_only_are_rejected(tmp_path: Path, content: bytes) -> None:
    path = write(tmp_path / "empty.txt", content)
    err = reject([path])
    assert err.path == path
    assert err.reason == "file is empty"
    assert str(err) == f"{path}: file is empty"


def test_too_large(tmp_path: Path) -> None:
    path = write(tmp_path / "big.txt", "x" * 100)
    err = reject([path], max_bytes=10)
    assert err.path == path
    assert err.reason == "file is too large (0.0001 MB > 0.00001 MB)"
    assert load_one(path, max_bytes=100)[0] == "x" * 100


def test_newlines_are_normalized(tmp_path: Path) -> None:
    path = write(tmp_path / "crlf.txt", b"one\r\ntwo\rthree\n\r\nfour")
    (doc,) = load_documents([path])
    assert doc.text == "one\ntwo\nthree\n\nfour"
    assert doc.sha256 == hashlib.sha256(b"one\ntwo\nthree\n\nfour").hexdigest()


def test_other_suffix_accepted_when_named(tmp_path: Path) -> None:
    log = write(tmp_path / "server.log", "2024-01-01 started\n")
    csv = write(tmp_path / "data.csv", "a,b\n1,2\n")
    docs = load_documents([log, csv])
    assert [d.path for d in docs] == [log, csv]


# --- paths ----------------------------------------------------------------------------------------


def test_missing_path(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.txt")
    err = reject([missing])
    assert err.path == missing
    assert err.reason == "no such file or directory"


def test_directory_walk_sorted_and_filtered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [
        "docs/b.md",
        "docs/a.txt",
        "docs/sub/c.rst",
        "docs/z.markdown",
        "docs/y.text",
        "docs/skip.py",
        "docs/image.png",
        "docs/.hidden.md",
        "docs/.git/config.txt",
        "docs/sub/.cache/d.md",
    ]:
        write(tmp_path / name, f"content of {name}\n")
    docs = load_documents(["docs"])
    assert [d.path for d in docs] == [
        os.path.join("docs", "a.txt"),
        os.path.join("docs", "b.md"),
        os.path.join("docs", "sub", "c.rst"),
        os.path.join("docs", "y.text"),
        os.path.join("docs", "z.markdown"),
    ]
    assert docs[0].text == "content of docs/a.txt\n"
    # the current directory: paths come out relative, without "./"
    monkeypatch.chdir(tmp_path / "docs")
    assert [d.path for d in load_documents(["."])][:2] == ["a.txt", "b.md"]


def test_directory_without_supported_files(tmp_path: Path) -> None:
    write(tmp_path / "code" / "main.py", "print('hi')\n")
    err = reject([str(tmp_path / "code")])
    assert err.path == str(tmp_path / "code")
    assert err.reason.startswith("no supported files found (text: .txt .md")


def test_glob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ["notes/b.md", "notes/a.md", "notes/deep/c.md", "notes/x.py", "notes/d.txt"]:
        write(tmp_path / name, f"{name}\n")
    assert [d.path for d in load_documents(["notes/*.md"])] == ["notes/a.md", "notes/b.md"]
    assert [d.path for d in load_documents(["notes/**/*.md"])] == [
        "notes/a.md",
        "notes/b.md",
        "notes/deep/c.md",
    ]
    err = reject(["notes/*.rst"])
    assert err.path == "notes/*.rst"
    assert err.reason.startswith("no supported files found (text: .txt .md")


def test_dedupe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "docs" / "a.md", "alpha\n")
    write(tmp_path / "docs" / "b.md", "beta\n")
    docs = load_documents(["docs/a.md", str(tmp_path / "docs" / "a.md"), "docs", "docs/*.md"])
    assert [d.path for d in docs] == ["docs/a.md", "docs/b.md"]


def test_whole_batch_is_validated_every_bad_file_named(tmp_path: Path) -> None:
    good = write(tmp_path / "good.txt", "fine\n")
    empty = write(tmp_path / "empty.txt", "")
    binary = write(tmp_path / "bin.txt", b"\x00\x01\x02" * 100)
    err = reject([good, empty, binary])
    assert err.path == empty and empty in str(err) and binary in str(err)  # both named, in order
    assert reject([good, binary, empty]).path == binary
    missing = str(tmp_path / "missing.md")
    assert reject([good, binary, missing]).path == missing  # paths are all checked before reading


def test_supported_suffixes() -> None:
    assert set(SUPPORTED_SUFFIXES) == {".txt", ".md", ".markdown", ".rst", ".text"}
