"""The `KeywordModel`'s roles for structured documents (TOC, structure, descriptions, tree search,
collections): word overlap, no model, deterministic. Mixed into `knowtree.testing.models.KeywordModel`."""

from __future__ import annotations

import re
from typing import Any

from knowtree.llm.base import Request
from knowtree.testing.overlap import between, question_line, words
from knowtree.text import SENTENCE_BREAK


class DocumentRoles:
    def _toc(self, prompt: str, request: Request) -> dict[str, Any]:
        text = between(prompt, "<text>", "</text>")
        entries = []
        for line in text.splitlines():
            m = re.match(r"^\s*(\d+(?:\.\d+)*\.?\s+)?([A-Za-z][^\d]*?)[\s.]+(\d{1,3})\s*$", line)
            if m:
                level = 1 + (m.group(1) or "").strip().rstrip(".").count(".")
                entries.append(
                    {
                        "title": ((m.group(1) or "") + m.group(2)).strip(),
                        "page": int(m.group(3)),
                        "level": level,
                    }
                )
        return {"is_toc": "contents" in text.lower() and bool(entries), "entries": entries}

    def _structure(self, prompt: str, request: Request) -> dict[str, Any]:
        sections = []
        for page, opening in re.findall(r"^<page (\d+)> (.*)$", prompt, flags=re.M):
            title = " ".join(opening.split()[:4])
            if title and title[0].isupper():
                sections.append({"title": title, "page": int(page), "level": 1})
        return {"sections": sections}

    def _describe(self, prompt: str, request: Request) -> dict[str, Any]:
        text = " ".join(between(prompt, "<text>", "</text>").split())
        first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:200]
        year = re.search(r"\b(19|20)\d\d\b", text)
        return {
            "description": first or "A document.",
            "company": "",
            "year": year.group(0) if year else "",
            "doc_type": "",
        }

    def _search(self, prompt: str, request: Request) -> dict[str, Any]:
        wanted = words(question_line(prompt))
        rows = re.findall(
            r"^\s*\[(\d+)\] (.*)$", between(prompt + "\n", "Outline:", "\n\n") or prompt, flags=re.M
        )
        scored = sorted(((len(wanted & words(body)), -int(i), int(i)) for i, body in rows), reverse=True)
        picked = [i for s, _, i in scored if s > 0][:2]
        return {"thinking": "the titles sharing most words with the question", "node_list": picked}

    def _search_answer(self, prompt: str, request: Request) -> dict[str, Any]:
        wanted = words(question_line(prompt))
        best, score, source = "", 0, 1
        for n, head, body in re.findall(
            r"^\[(\d+)\] (.*?)\n<source>\n(.*?)\n</source>", prompt, flags=re.M | re.S
        ):
            context = words(head.split(", ", 2)[-1])  # the section title is part of what a reader sees
            for s in SENTENCE_BREAK.split(body):
                overlap = len(wanted & (words(s) | context))
                if overlap > score:
                    best, score, source = s.strip(), overlap, int(n)
        if wanted and score / len(wanted) >= 0.5:
            return {"found": True, "source": source, "quote": best, "answer": best}
        return {"found": False, "source": 1, "quote": "", "answer": ""}

    def _collection(self, prompt: str, request: Request) -> dict[str, Any]:
        wanted = words(question_line(prompt))
        rows = re.findall(r"^\[(\d+)\] (.*)$", prompt, flags=re.M)
        scored = sorted(((len(wanted & words(body)), -int(i), int(i)) for i, body in rows), reverse=True)
        return {"thinking": "most shared words", "docs": [scored[0][2]] if scored else [0]}

    def _collection_filter(self, prompt: str, request: Request) -> dict[str, Any]:
        question = question_line(prompt).lower()
        out: dict[str, str] = {}
        for field, values in re.findall(r"^- (\w+): (.*)$", prompt, flags=re.M):
            hits = [v for v in values.split(" | ") if v and v.lower() in question]
            out[field] = max(hits, key=len) if hits else ""
        return out
