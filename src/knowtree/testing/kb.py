"""The `KeywordModel`'s roles for knowledge bases (AutoKB): word overlap, no model, deterministic.
Mixed into `knowtree.testing.models.KeywordModel`, which picks the role from the request's reply schema
(`role_for`); attribute names, allowed values and texts are read from the prompt's own lines."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from knowtree.llm.base import Request
from knowtree.testing.overlap import WORD, sentences, words
from knowtree.text import STOPWORDS


def _words(text: str) -> set[str]:
    return words(text, min_len=3)


def _attributes(prompt: str) -> dict[str, list[str]]:
    """`- name (description): v1, v2, or any` lines of the prompt."""
    out = {}
    for name, values in re.findall(r"^- (\w+)(?: \(.*?\))?: (.*), or any$", prompt, flags=re.M):
        out[name] = [v.strip() for v in values.split(",") if v.strip()]
    return out


def _values_in(text: str, values: list[str]) -> list[str]:
    low = " " + " ".join(WORD.findall(text.lower())) + " "
    return [v for v in values if f" {' '.join(WORD.findall(v.lower()))} " in low]


def _first_sentence(text: str) -> str:
    parts = sentences(text)
    return parts[0] if parts else text.strip()


class KBRoles:
    def _kb_context(self, prompt: str, request: Request) -> dict[str, Any]:
        chunk = prompt.split("<chunk>", 1)[-1].split("</chunk>", 1)[0]
        return {"context": _first_sentence(chunk)[:200] or "A passage."}

    def _kb_themes(self, prompt: str, request: Request) -> dict[str, Any]:
        issues = re.findall(r"^- (.*)$", prompt.split("Issues", 1)[-1], flags=re.M)
        counts: Counter[str] = Counter()
        for text in issues:
            # each word once per issue, in the issue's order (not a set's: the order of equal counts,
            # hence the themes' numbers, would change with the process's hash seed)
            counts.update(
                w for w in dict.fromkeys(w.lower() for w in WORD.findall(text)) if w not in STOPWORDS and len(w) > 3
            )
        top = [w for w, n in counts.most_common(5) if n > 1] or ["general"]
        return {"themes": [f"Issues about {w}" for w in top]}

    def _kb_theme_assign(self, prompt: str, request: Request) -> dict[str, Any]:
        themes = re.findall(r"^(\d+)\. (.*)$", prompt, flags=re.M)
        out = {}
        for key, text in re.findall(r"^(issue_\d+): (.*)$", prompt, flags=re.M):
            scores = [(len(_words(text) & _words(name)), -int(n), int(n)) for n, name in themes]
            best = max(scores)
            out[key] = best[2] if best[0] > 0 else int(themes[-1][0])
        return out

    def _kb_subtree(self, prompt: str, request: Request) -> dict[str, Any]:
        attrs = _attributes(prompt)
        out = {}
        for block in re.split(r"^(?=group_\d+: )", prompt, flags=re.M)[1:]:
            key, seed = re.match(r"(group_\d+): seed issue: (.*)", block).groups()  # type: ignore[union-attr]
            texts = [seed, *re.findall(r"^  similar: (.*)$", block, flags=re.M)]
            meta, vary = {}, {}
            for name, values in attrs.items():
                seen = list(dict.fromkeys(v for t in texts for v in _values_in(t, values)))
                meta[name] = seen[0] if len(seen) == 1 else "any"
                vary[name] = seen[:3] if len(seen) > 1 else []
            out[key] = {"title": seed.rstrip("…")[:150], "metadata": meta, "vary": vary}
        return out

    def _kb_query_meta(self, prompt: str, request: Request) -> dict[str, Any]:
        attrs = _attributes(prompt)
        query = re.search(r"^Issue: (.*)$", prompt, flags=re.M)
        text = query.group(1) if query else ""
        out = {}
        for name, values in attrs.items():
            found = _values_in(text, values)
            out[name] = found[0] if len(found) == 1 else "any"
        return out

    def _kb_solution(self, prompt: str, request: Request) -> dict[str, Any]:
        issue = re.search(r"^Issue: (.*)$", prompt, flags=re.M)
        wanted = _words(issue.group(1) if issue else "")
        passages = re.findall(r"^\[(\d+)\] \((.*?)\) (.*?)(?=^\[\d+\] |\Z)", prompt, flags=re.M | re.S)
        if not passages:
            return {"solution": "No documented solution was found for this issue.", "citations": []}
        n, _path, text = max(passages, key=lambda p: (len(wanted & _words(p[2])), -int(p[0])))
        body = text.split("\n\nWrite a solution", 1)[0].strip()
        long_ones = [p for p in sentences(body) if len(p.split()) >= 4]
        quote = max(long_ones, key=lambda p: len(wanted & _words(p)), default=body)[:200]
        return {
            "solution": f"{quote} See the cited passage.",
            "citations": [{"passage": int(n), "quote": quote}],
        }

    def _kb_compliance(self, prompt: str, request: Request) -> dict[str, Any]:
        """Every rule followed ("no": not broken); the deterministic phrase checks find the rest."""
        return dict.fromkeys((request.schema_ or {}).get("properties") or (), "no")
