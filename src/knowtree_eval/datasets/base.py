"""What every dataset becomes: questions (`Case`) and the text they are asked over (`Corpus`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from knowtree.retrieve.bm25 import Passage, fingerprint

KINDS = ("quality", "locomo", "financebench", "hotpotqa", "jsonl")
DEFAULT_CHUNK_CHARS = 1200  # passages cut from long documents: ~300 tokens, a common retrieval unit


@dataclass(slots=True)
class Case:
    """One question, with whatever gold the dataset has.

    `question` is the question alone; for multiple choice the options are in `options` (texts, in
    letter order) and `gold_letter` is the correct one ("A"…); `prompt()` renders both together.
    `evidence` holds passage or document ids of `corpus` that contain the answer.
    """

    id: str
    question: str
    corpus: str
    answer: str | None = None
    options: list[str] | None = None
    gold_letter: str | None = None
    evidence: list[str] = field(default_factory=list)
    category: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def prompt(self) -> str:
        """The question as a model should see it: with lettered options when it has them."""
        return question_prompt(self.question, self.options)


def question_prompt(question: str, options: Sequence[str] | None) -> str:
    """A question as a model sees it: followed by its options lettered (A), (B)… in the order given."""
    if not options:
        return question
    lines = [f"({chr(65 + i)}) {o}" for i, o in enumerate(options)]
    return question.rstrip() + "\n\n" + "\n".join(lines)


@dataclass
class Corpus:
    """The passages questions are asked over, grouped into documents (in reading order)."""

    id: str
    passages: dict[str, Passage] = field(default_factory=dict)
    documents: dict[str, list[str]] = field(default_factory=dict)  # doc id → passage ids, in order
    _fp: str | None = field(default=None, repr=False)

    def add(self, passage: Passage) -> None:
        if passage.id in self.passages:
            return  # the first occurrence wins: pooled datasets repeat paragraphs
        doc = passage.doc or passage.id
        passage.doc = doc
        self.passages[passage.id] = passage
        self.documents.setdefault(doc, []).append(passage.id)
        self._fp = None

    def __len__(self) -> int:
        return len(self.passages)

    def text(self, pid: str) -> str:
        return self.passages[pid].text

    def document_text(self, doc: str, sep: str = "\n\n") -> str:
        """A whole document, rebuilt from its passages (what tree-building methods ingest)."""
        return sep.join(self.passages[p].text for p in self.documents[doc])

    def knows(self, evidence_id: str) -> bool:
        return evidence_id in self.passages or evidence_id in self.documents

    def fingerprint(self) -> str:
        if self._fp is None:
            self._fp = fingerprint(self.passages.values())
        return self._fp


@dataclass
class Dataset:
    kind: str
    path: str
    cases: list[Case]
    corpora: dict[str, Corpus]
    notes: list[str] = field(default_factory=list)  # what the loader dropped or repaired, and why

    def corpus(self, case: Case) -> Corpus:
        return self.corpora[case.corpus]

    @property
    def passages(self) -> int:
        return sum(len(c) for c in self.corpora.values())
