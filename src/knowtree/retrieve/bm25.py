"""A lexical (BM25) index over passages, on SQLite FTS5: the honest baseline every method must beat.

Why FTS5: it ships with Python's sqlite3 (no dependency), ranks with Okapi BM25 (`bm25()`), and an
index can live in a file next to knowtree's database so a corpus is indexed once, not once per run.

Query building matters as much as the ranking function. A question is free text, and FTS5's query
language gives meaning to quotes, parentheses, `*`, `:`, `-`, `^`, AND/OR/NOT/NEAR; passing a question
through unchanged either fails to parse or silently asks for a phrase or a boolean AND. So questions
are tokenized into words, every word is quoted (no syntax survives), and the words are OR-ed: a
passage matches when it shares any word, and BM25 ranks by how many and how rare. Stopwords are
dropped first (unless that leaves nothing), because a long question full of "what", "the", "did"
would otherwise match every passage and dilute the rare words that identify the answer.
The table uses FTS5's `porter` tokenizer, so "approved" in a question finds "approve" in a passage.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowtree.errors import UserError
from knowtree.store.flatindex import LexRow, lexical_table
from knowtree.store.flatindex import match_expression as match_expression  # part of this module's API
from knowtree.store.migrations import INDEX_NAME
from knowtree.text import QUERY_STOPWORDS

_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(slots=True)
class Passage:
    """A unit of retrieval: `id` is what evaluation compares with gold evidence, `doc` the document
    it belongs to (so evidence given per document still matches a passage cut from it)."""

    id: str
    text: str
    doc: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


PassageLike = Passage | tuple[str, str] | tuple[str, str, dict[str, Any]]


def query_terms(text: str, *, stopwords: frozenset[str] | None = QUERY_STOPWORDS) -> list[str]:
    """The distinct search words of a free-text query, in order, lowercased.

    Single letters are dropped (they are initials or option labels, not content), digits are kept
    ("5", "2018" can be the whole point of a question). If removing stopwords leaves nothing (a
    question such as "Who was it?"), the stopwords are kept rather than returning no results.
    """
    words = [w.lower() for w in _WORD.findall(text)]
    words = [w for w in words if len(w) > 1 or w.isdigit()]
    seen: dict[str, None] = {}
    for w in words:
        seen.setdefault(w, None)
    terms = list(seen)
    if stopwords:
        content = [w for w in terms if w not in stopwords]
        if content:
            return content
    return terms


def fingerprint(passages: Iterable[PassageLike]) -> str:
    """A content hash of passages (ids, documents and texts), to tell whether a stored index is current."""
    h = hashlib.sha256()
    for p in passages:
        pid, text, doc, _meta = unpack(p)
        for part in (pid, doc, text):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()[:24]


def unpack(p: PassageLike) -> tuple[str, str, str, dict[str, Any]]:
    """(id, text, doc, meta) of a passage given as a `Passage` or an (id, text[, meta]) tuple."""
    if isinstance(p, Passage):
        return p.id, p.text, p.doc, p.meta
    if isinstance(p, tuple) and len(p) in (2, 3):
        meta = p[2] if len(p) == 3 else {}  # type: ignore[misc]
        return str(p[0]), str(p[1]), "", dict(meta)
    raise TypeError(f"a passage is a Passage or an (id, text[, meta]) tuple, got {type(p).__name__}")


def check_index_name(name: str) -> None:
    """Index names become table names: letters, digits and '_' only (UserError otherwise)."""
    if not INDEX_NAME.fullmatch(name):
        raise UserError(f"index name {name!r}: use letters, digits and '_' (at most 64)")


class LexicalIndex:
    """BM25 search over passages, stored in an SQLite FTS5 table.

    `path` is an SQLite file (indexes persist and can be shared by several names) or ":memory:", or a
    PostgreSQL knowtree database (a `postgresql://` URL or a PostgreSQL store), where the ranking is
    FTS5's BM25 computed from postings (store/flatindex_pg.py; a query word FTS5 reads as a phrase of
    several tokens, such as "foo_bar", is left out there).
    `name` picks the table, so one file can hold one index per corpus.

        idx = LexicalIndex(":memory:")
        idx.add([Passage("p1", "Alice approved the budget"), ("p2", "The launch was in Lisbon")])
        idx.search("Who approved the budget?", k=1)   # [("p1", 1.23)]
    """

    def __init__(
        self,
        path: str | Path | Any = ":memory:",
        *,
        name: str = "passages",
        stopwords: frozenset[str] | None = QUERY_STOPWORDS,
    ) -> None:
        check_index_name(name)
        self.name = name
        self.stopwords = stopwords
        self._rows = lexical_table(path, name)
        self.path = str(self._rows.path)

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        self._rows.close()

    def __enter__(self) -> LexicalIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._rows.count()

    # -- writing -------------------------------------------------------------------------------
    def add(self, passages: Iterable[PassageLike]) -> int:
        """Index passages; a passage whose id is already indexed replaces the old one. Returns the count."""
        rows: list[LexRow] = []
        for p in passages:
            pid, text, doc, meta = unpack(p)
            rows.append((pid, doc, text, json.dumps(meta, ensure_ascii=False, default=str)))
        if not rows:
            return 0
        unique = list({r[0]: r for r in rows}.values())  # within one batch, the last passage with an id wins
        self._rows.put(unique)
        return len(unique)

    def clear(self) -> None:
        self._rows.clear()

    def ensure(self, passages: Sequence[PassageLike], fp: str | None = None) -> bool:
        """Make the index hold exactly `passages`; a no-op when a file index already does.

        Returns True when it (re)indexed. Lets a persistent `--db` index skip re-indexing a corpus
        that has not changed since the last run.
        """
        fp = fp or fingerprint(passages)
        if self._rows.fingerprint() == fp:
            return False
        self.clear()
        count = self.add(passages)
        self._rows.register(fp, count)
        return True

    # -- reading -------------------------------------------------------------------------------
    def search(
        self, query: str, k: int = 10, *, docs: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        """The `k` best passages for a free-text query as (id, score), best first.

        Scores are FTS5's BM25 negated, so higher is better; ties keep insertion order, so results
        are deterministic. `docs` restricts the search to passages of those documents.
        """
        if k <= 0:
            return []
        terms = query_terms(query, stopwords=self.stopwords)
        if not terms or (docs is not None and not docs):
            return []
        return [(pid, -score) for pid, score in self._rows.search(terms, k, docs)]

    def get(self, pid: str) -> Passage | None:
        row = self._rows.get(pid)
        return _passage(row) if row is not None else None

    def passages(self) -> list[Passage]:
        """Every indexed passage, in indexing order, read in one query."""
        return [_passage(r) for r in self._rows.rows()]

    def version(self) -> tuple[int, int, int]:
        """(passages, largest rowid, total text length): changes when passages are added, replaced or
        removed (a replaced passage gets a new rowid), so a caller can tell a fit is stale."""
        return self._rows.version()

    def __iter__(self) -> Iterator[str]:
        return self._rows.ids()


def _passage(row: LexRow) -> Passage:
    pid, doc, body, meta = row
    return Passage(id=pid, text=body, doc=doc, meta=json.loads(meta or "{}"))


_TOKEN = re.compile(r"[a-z0-9]+")


def bm25_scores(query: str, texts: list[str], k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 of each text against the query, the texts themselves as the collection (in memory, no
    index: for ranking a handful of texts, e.g. the leaves of one section)."""
    docs = [_TOKEN.findall(t.lower()) for t in texts]
    terms = [t for t in dict.fromkeys(_TOKEN.findall(query.lower())) if t not in QUERY_STOPWORDS]
    n = len(docs)
    avg = sum(map(len, docs)) / max(n, 1) or 1.0
    counts = [Counter(d) for d in docs]
    out = []
    for d, c in zip(docs, counts, strict=True):
        score = 0.0
        for t in terms:
            df = sum(1 for cc in counts if t in cc)
            if not df or not c[t]:
                continue
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * c[t] * (k1 + 1) / (c[t] + k1 * (1 - b + b * len(d) / avg))
        out.append(score)
    return out
