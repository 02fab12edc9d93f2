"""Load text files as `Document`s.

Each entry of `paths` may be

* a file: taken as named, whatever its suffix, as long as it is text (users have .log, .csv files);
* a directory: walked recursively for files with a supported suffix (hidden files and
  directories skipped), in sorted order;
* a glob pattern (``**`` allowed): the matching files with a supported suffix, in sorted order.

Decoding: strict UTF-8 first (a UTF-8 BOM is stripped), UTF-16/UTF-32 when the data starts with
their byte-order mark, UTF-16 without a byte-order mark when its zero bytes show it (mostly Latin
text), otherwise charset detection. Newlines are normalized to ``"\\n"``
(``"\\r\\n"`` and a lone ``"\\r"`` both become ``"\\n"``): `Document.text` is the normalized text,
and every span offset and line number downstream refers to it, not to the raw bytes.

All files are read and validated before anything is returned; a problem is raised as `InputError`
naming the file (several as `BadFilesError` naming each), so the caller can reject the whole batch up
front, or, with `skip_bad`, build from the good files and report the others.
"""

from __future__ import annotations

import codecs
import glob
import hashlib
import os
import re
from collections.abc import Sequence

from knowtree.errors import InputError
from knowtree.ingest.formats import NO_FILES, TEXT_SUFFIXES
from knowtree.ingest.problems import Mapper, Skipped, load_each, missing_reason
from knowtree.ingest.roots import ReadRoots
from knowtree.types import Document

SUPPORTED_SUFFIXES: tuple[str, ...] = TEXT_SUFFIXES

_SNIFF_BYTES = 8192  # binary sniffing looks at the start of the file only
_MAX_CONTROL_BYTE_SHARE = 0.05  # of the sniffed bytes
_MAX_BAD_CHAR_SHARE = 0.05  # of the decoded characters: replacement characters and controls
_GLOB_CHARS = frozenset("*?[")

# Control bytes that do not occur in text (tab, newlines, form feed and ESC, used by ANSI colours
# in logs, are allowed).
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
# The same for decoded text, plus C1 controls (what binary data becomes when read as latin-1)
# and U+FFFD (what undecodable bytes become).
_BAD_CHARS = re.compile("[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f-\x9f\ufffd]")

_EMPTY = "file is empty"
_BINARY = "looks like a binary file, not text"
_UNDECODABLE = "cannot be decoded as text (tried utf-8 and charset detection)"
_BAD_BOM = "cannot be decoded as text (starts with a UTF-16/32 byte-order mark but is not valid UTF-16/32)"


def load_documents(
    paths: Sequence[str],
    *,
    max_bytes: int = 50_000_000,
    skip_bad: bool = False,
    skipped: list[Skipped] | None = None,
    within: ReadRoots | None = None,
    mapper: Mapper | None = None,
) -> list[Document]:
    """Read every file named by `paths` (files, directories, glob patterns) as a `Document`.

    Every entry and file is checked (missing, matches nothing, empty, too large, binary, undecodable,
    a symbolic link loop); nothing is returned unless every file is good: one bad file raises its
    `InputError`, several raise `BadFilesError` naming each. With `skip_bad`, the good files are
    returned and each bad one is appended to `skipped` (an error only when no file is good).
    The same file reached twice (by any route, compared by resolved path) is loaded once.
    `within`: read only files that resolve under these roots (`knowtree.ingest.roots`); the others
    are bad files like the rest.
    """
    if isinstance(paths, str):  # a lone string would be iterated character by character
        paths = [paths]
    return load_each(
        paths, _expand, lambda path: _load_file(path, max_bytes), skip_bad=skip_bad, skipped=skipped,
        within=within, mapper=mapper,
    )


def _expand(entry: str) -> list[str]:
    """The files an entry names, as display paths (relative stays relative)."""
    if os.path.isdir(entry):
        files = _walk(entry)
        if not files:
            raise InputError(entry, NO_FILES)
        return files
    if os.path.exists(entry):  # an existing name wins even if it contains glob characters
        if not os.path.isfile(entry):
            raise InputError(entry, "not a regular file")
        return [entry]
    if _GLOB_CHARS.intersection(entry):
        matches = sorted(
            m for m in glob.glob(entry, recursive=True) if os.path.isfile(m) and _is_supported(m)
        )
        if not matches:
            raise InputError(entry, NO_FILES)
        return matches
    raise InputError(entry, missing_reason(entry))


def _walk(root: str) -> list[str]:
    at_cwd = os.path.normpath(root) == "."
    found: list[tuple[tuple[str, ...], str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # prune hidden directories
        for name in filenames:
            if name.startswith(".") or not _is_supported(name):
                continue
            path = os.path.join(dirpath, name)
            if at_cwd:
                path = os.path.normpath(path)  # "a.md", not "./a.md"
            if os.path.isfile(path) or os.path.islink(path):  # a broken link is reported, not skipped
                key = tuple(os.path.relpath(path, root).split(os.sep))
                found.append((key, path))
    found.sort()
    return [path for _, path in found]


def _is_supported(path: str) -> bool:
    return os.path.splitext(path)[1].lower() in SUPPORTED_SUFFIXES


def _load_file(path: str, max_bytes: int) -> Document:
    if not os.path.exists(path):
        raise InputError(path, missing_reason(path))
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            raise InputError(path, _too_large(size, max_bytes))
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)  # bounded: the file may have grown since stat
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror or e})") from e
    if len(data) > max_bytes:
        raise InputError(path, _too_large(max(size, len(data)), max_bytes))
    if not data:
        raise InputError(path, _EMPTY)
    text, encoding = _decode(path, data)
    text = without_nul(text)  # a stray NUL (under the binary threshold) is no text: dropped
    # Normalize newlines; spans and line numbers are offsets into this normalized text.
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise InputError(path, _EMPTY)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Document(path=path, text=text, encoding=encoding, sha256=sha)


def without_nul(text: str) -> str:
    """`text` without NUL characters. They carry no text (pypdf emits them for glyphs it cannot map;
    a text file holds a few at most, more is refused as binary), and PostgreSQL's TEXT cannot store
    them: every reader drops them, so a document reads and stores the same on both backends."""
    return text.replace("\x00", "")


def _too_large(size: int, max_bytes: int) -> str:
    return f"file is too large ({_mb(size)} MB > {_mb(max_bytes)} MB)"


def _mb(n: int) -> str:
    if n >= 100_000:
        return f"{n / 1_000_000:.1f}"
    return f"{n / 1_000_000:.6f}".rstrip("0").rstrip(".")  # small limits (tests) stay readable


def _bom_codecs(data: bytes) -> list[str]:
    """Codecs to try for data that starts with a UTF-16/UTF-32 byte-order mark."""
    if data.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        # FF FE 00 00 is also UTF-16-LE text that starts with U+0000: try that second.
        return ["utf-32", "utf-16"] if data.startswith(codecs.BOM_UTF32_LE) else ["utf-32"]
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return ["utf-16"]
    return []


def _utf16_without_bom(sniff: bytes) -> str | None:
    """"utf-16-le"/"utf-16-be" when the bytes look like UTF-16 text without a byte-order mark: mostly
    Latin text, so the high byte of most characters is zero (at odd offsets for little-endian, even
    for big-endian) and the other byte rarely is. None otherwise (then NUL bytes mean binary)."""
    if len(sniff) < 4:
        return None
    even, odd = sniff[0::2], sniff[1::2]
    zero_even, zero_odd = even.count(0) / len(even), odd.count(0) / len(odd)
    if zero_odd > 0.6 and zero_even < 0.05:
        return "utf-16-le"
    if zero_even > 0.6 and zero_odd < 0.05:
        return "utf-16-be"
    return None


def _bad_share(text: str) -> float:
    return len(_BAD_CHARS.findall(text)) / max(len(text), 1)


def _decode(path: str, data: bytes) -> tuple[str, str]:
    """Decode `data` or raise `InputError`; returns (text, codec name)."""
    bom_codecs = _bom_codecs(data)
    if bom_codecs:
        for codec in bom_codecs:
            try:
                text = data.decode(codec)  # these codecs consume the byte-order mark
            except UnicodeDecodeError:
                continue
            if _bad_share(text) > _MAX_BAD_CHAR_SHARE:
                raise InputError(path, _BINARY)
            return text, codec
        raise InputError(path, _BAD_BOM)

    sniff = data[:_SNIFF_BYTES]
    if b"\x00" in sniff:
        codec = _utf16_without_bom(sniff)
        if codec is not None:
            try:
                text = data.decode(codec)
            except UnicodeDecodeError:
                pass
            else:
                if _bad_share(text) <= _MAX_BAD_CHAR_SHARE:
                    return text, codec
        raise InputError(path, _BINARY)
    control = len(sniff) - len(sniff.translate(None, _CONTROL_BYTES))
    if control / len(sniff) > _MAX_CONTROL_BYTE_SHARE:
        raise InputError(path, _BINARY)

    codec = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8"
    try:
        text = data.decode(codec)
    except UnicodeDecodeError:
        pass
    else:
        if _bad_share(text) > _MAX_BAD_CHAR_SHARE:
            raise InputError(path, _BINARY)
        return text, codec

    detected = _detect(data)
    if detected is None or _bad_share(detected[0]) > _MAX_BAD_CHAR_SHARE:
        raise InputError(path, _UNDECODABLE)
    return detected


def _detect(data: bytes) -> tuple[str, str] | None:
    """Charset detection for data that is not UTF-8: (text, encoding), or None.

    We use charset-normalizer, a maintained library (and already a dependency), rather than
    hand-written heuristics that would only ever cover a few code pages. Imported here so that
    importing knowtree stays cheap.

    One tie-break on top of it: on short or accent-dense text the library cannot tell the single-byte
    Latin code pages apart (they agree on ASCII and differ in a handful of letters), and among equals
    it falls back to an arbitrary order, e.g. Spanish cp1252 comes back as cp1250 ("ñ" read as "ń").
    When cp1252, by far the most common legacy encoding, is among its candidates and scores about
    as well (chaos within 0.01 of the best) or better on its language-coherence measure, we take
    cp1252. This costs some Central European files whose text cp1252 also reads plausibly.
    """
    from charset_normalizer import from_bytes

    # A slightly looser chaos threshold than the default 0.2 keeps cp1252 among the candidates
    # for accent-dense text, which the library's chunk probing otherwise drops.
    results = from_bytes(data, threshold=0.25)
    best = results.best()
    if best is None or best.encoding is None:
        return None
    match, encoding = best, best.encoding
    try:
        western = results["cp1252"]
    except KeyError:
        pass
    else:
        if western is best or western.chaos <= best.chaos + 0.01 or western.coherence > best.coherence:
            match, encoding = western, "cp1252"
    try:
        return str(match), encoding
    except (UnicodeDecodeError, LookupError):
        return None
