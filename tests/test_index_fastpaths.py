"""The index's fast paths give exactly what the plain code gave (the index stays byte-identical):
citation JSON, content hashes, the body hashes of pieces sharing a context, and the piece split."""

from __future__ import annotations

import hashlib
import json
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowtree.retrieve.context import Entry, body_hashes, cite_json, split_pieces
from knowtree.types import content_hash

_TEXT = st.text(alphabet=st.sampled_from(list("ab .!?\n\"'([AZ09é\u2028\x00")), max_size=1500)
# no deadline: the machine the suite runs on is shared and loaded
_SETTINGS = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_SCALAR = st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))


def _hash_part_by_part(*parts: str, length: int = 16) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:length]


@_SETTINGS
@given(st.lists(st.text(max_size=50), max_size=6))
def test_content_hash_is_the_part_by_part_hash(parts: list[str]) -> None:
    assert content_hash(*parts) == _hash_part_by_part(*parts)
    assert content_hash(*parts, length=32) == _hash_part_by_part(*parts, length=32)


@_SETTINGS
@given(st.dictionaries(st.text(max_size=12), _SCALAR, max_size=7))
def test_cite_json_is_json_dumps(cite: dict[str, object]) -> None:
    assert cite_json(cite) == json.dumps(cite)


def test_cite_json_of_a_usual_citation() -> None:
    cite = {"node_id": "ab12", "file": 'dir/"é".md', "line_start": 3, "line_end": 9, "page_start": 10**20}
    assert cite_json(cite) == json.dumps(cite)


@_SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["", "Doc > A", "Doc > B\npages 1-2"]), _TEXT), max_size=8))
def test_body_hashes_are_each_entrys_body_hash(items: list[tuple[str, str]]) -> None:
    entries = [Entry(f"e{i}", "n", None, True, i, text, ctx) for i, (ctx, text) in enumerate(items)]
    assert body_hashes(entries) == [e.body_hash for e in entries]


_LOOK_BEHIND = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])")


def _split_with_look_behind(text: str, max_chars: int) -> list[tuple[int, str]]:
    """split_pieces as it was: sentence ends found by a look-behind, no short-text shortcut."""
    units: list[tuple[int, str]] = []
    pos = 0
    for line in text.splitlines(keepends=True):
        if len(line) <= max_chars:
            units.append((pos, line))
        else:
            parts, last = [], 0
            for m in _LOOK_BEHIND.finditer(line):
                parts.append(line[last : m.end()])
                last = m.end()
            parts.append(line[last:])
            out: list[str] = []
            for p in parts:
                while len(p) > max_chars * 2:
                    cut = p.rfind(" ", 0, max_chars)
                    cut = cut if cut > 0 else max_chars
                    out.append(p[:cut])
                    p = p[cut:]
                out.append(p)
            merged: list[str] = []
            for p in out:
                if merged and len(merged[-1]) + len(p) <= max_chars:
                    merged[-1] += p
                else:
                    merged.append(p)
            start = 0
            for part in (p for p in merged if p):
                units.append((pos + start, part))
                start += len(part)
        pos += len(line)
    pieces: list[tuple[int, str]] = []
    cur_start, cur = 0, ""
    for offset, unit in units:
        if cur and len(cur) + len(unit) > max_chars:
            pieces.append((cur_start, cur))
            cur = ""
        if not cur:
            cur_start = offset
        cur += unit
    if cur:
        pieces.append((cur_start, cur))
    return [(o, p) for o, p in pieces if p.strip()]


@_SETTINGS
@given(_TEXT, st.sampled_from([20, 60, 400]))
def test_split_pieces_is_the_look_behind_split(text: str, max_chars: int) -> None:
    assert split_pieces(text, max_chars) == _split_with_look_behind(text, max_chars)
