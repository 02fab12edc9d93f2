"""Models for tests, shipped with the library: no network, no weights, deterministic.

* `ScriptedModel` replays a list of replies (strings, dicts or functions of the request) in order.
* `FunctionModel` answers every request with a function.
* `KeywordModel` plays every knowtree role by word overlap. The role comes from the reply schema the
  request asks for (its property names, `role_for`), never from the prompt's wording; the role then
  reads the data the prompt carries (the `<text>` block, `Option N:` blocks, `part_N:` lines) and
  answers like a careful but unimaginative model. It makes whole builds and walks testable offline,
  and is selectable as `--model keyword`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from knowtree.errors import ConfigError
from knowtree.llm.base import Completion, Model, Request
from knowtree.llm.registry import ModelSpec
from knowtree.testing.docs import DocumentRoles
from knowtree.testing.kb import KBRoles
from knowtree.testing.overlap import WORD, between, sentences, words
from knowtree.text import STOPWORDS

Reply = str | dict[str, Any] | Completion | Exception | Callable[[Request], Any]


def _to_completion(value: Any, request: Request) -> Completion:
    if isinstance(value, Completion):
        return value
    text = value if isinstance(value, str) else json.dumps(value)
    prompt_chars = sum(len(m.content) for m in request.messages)
    return Completion(text=text, input_tokens=max(1, prompt_chars // 4), output_tokens=max(1, len(text) // 4))


class FunctionModel(Model):
    def __init__(self, fn: Callable[[Request], Any], *, id: str = "function", max_concurrency: int = 4):
        self.fn = fn
        self.id = id
        self.max_concurrency = max_concurrency
        self.requests: list[Request] = []
        self._lock = threading.Lock()

    def complete(self, request: Request) -> Completion:
        with self._lock:
            self.requests.append(request)
        value = self.fn(request)
        if isinstance(value, Exception):
            raise value
        return _to_completion(value, request)


class ScriptedModel(FunctionModel):
    """Replies in order; running out of replies is a test failure, not a silent default."""

    def __init__(self, replies: Sequence[Reply], *, id: str = "scripted") -> None:
        self._replies = list(replies)
        super().__init__(self._next, id=id, max_concurrency=1)

    def _next(self, request: Request) -> Any:
        if not self._replies:
            raise AssertionError(f"ScriptedModel ran out of replies (request #{len(self.requests)})")
        reply = self._replies.pop(0)
        if callable(reply) and not isinstance(reply, Exception):
            return reply(request)
        return reply

    @property
    def remaining(self) -> int:
        return len(self._replies)


# -- the keyword model ------------------------------------------------------------------------
# -- the keyword model: the role comes from the reply's schema ----------------------------------
def keyword_except(replies: dict[str, Any], *, id: str = "keyword-except") -> FunctionModel:
    """The keyword model, except for the reply schemas named in `replies` (schema name → the reply
    to give): for a test that needs one step to answer a certain way and every other step to work."""
    keyword = KeywordModel()

    def fn(request: Request) -> Any:
        if request.schema_name in replies:
            return replies[request.schema_name]
        return keyword.fn(request)

    return FunctionModel(fn, id=id)


def fields(names: str) -> frozenset[str]:
    return frozenset(names.split())


#: the reply's top-level property names → the role that fills it in. A tuple lists roles asking
#: for the same reply (same names, same required ones): the schema's name tells them apart.
ROLES_BY_FIELDS: dict[frozenset[str], str | tuple[str, ...]] = {
    fields("summary content_types critical_actions decisions noteworthy_events about"): "leaf_meta",
    fields("summary critical_actions decisions noteworthy_events"): "branch_meta",
    fields("parts"): "decompose",
    fields("reason choice"): ("choose", "memory_choose"),
    fields("answer"): ("combine", "answer"),
    fields("summary"): "raptor_summary",
    fields("correct reason"): "judge",
    fields("is_toc entries"): "toc",
    fields("sections"): "structure",
    fields("description company year doc_type"): "describe",
    fields("thinking node_list"): "search",
    fields("found source quote answer"): "search_answer",
    fields("thinking docs"): "collection",
    fields("choice name summary events about"): "topic",
    fields("name summary events"): "topic_merge",
    fields("found answer messages superseded"): "memory_answer",
    fields("tool answer messages start end node"): "memory_agent",
    fields("context"): "kb_context",
    fields("themes"): "kb_themes",
    fields("solution citations"): "kb_solution",
}
#: replies with one numbered property per item asked about (part_1, part_2, ...): every name matches
ROLES_BY_NUMBERED_FIELDS: list[tuple[re.Pattern[str], str | tuple[str, ...]]] = [
    (re.compile(r"part_\d+"), "read"),
    (re.compile(r"issue_\d+"), "kb_theme_assign"),
    (re.compile(r"group_\d+"), "kb_subtree"),
    (re.compile(r"\d+"), ("nav_judge", "kb_compliance")),
]
#: replies whose property names are the caller's own (a collection's metadata fields, a knowledge
#: base's attributes): the schema's name says which
ROLES_WITH_OPEN_FIELDS = ("collection_filter", "kb_query_meta")


def role_for(request: Request) -> str:
    """The role a request asks the keyword model to play, from the reply schema it asks for: its
    property names, then its name where those are shared or the caller's own. A request without a
    schema (a raw completion) is played by its schema name."""
    names = frozenset((request.schema_ or {}).get("properties") or ())
    if not names:
        return request.schema_name
    roles = ROLES_BY_FIELDS.get(names)
    if isinstance(roles, str):
        return roles
    if roles is not None and request.schema_name in roles:
        return request.schema_name
    if roles is None:
        for pattern, numbered in ROLES_BY_NUMBERED_FIELDS:
            if all(pattern.fullmatch(n) for n in names):
                if isinstance(numbered, str):
                    return numbered
                return request.schema_name if request.schema_name in numbered else numbered[0]
        if request.schema_name in ROLES_WITH_OPEN_FIELDS:
            return request.schema_name
    raise ValueError(
        f"KeywordModel knows no role replying with {sorted(names)} (schema {request.schema_name!r})"
    )


class KeywordModel(DocumentRoles, KBRoles, FunctionModel):
    def __init__(self) -> None:
        super().__init__(self.reply, id="keyword", max_concurrency=4)

    def reply(self, request: Request) -> dict[str, Any]:
        """The reply to a request, by the role its reply schema names (`role_for`); tests compose it
        with their own replies."""
        prompt = request.messages[-1].content
        role = role_for(request)
        handler = getattr(self, f"_{role}", None)
        if handler is None:
            raise ValueError(f"KeywordModel cannot play the role {role!r}")
        return handler(prompt, request)

    def _leaf_meta(self, prompt: str, request: Request) -> dict[str, Any]:
        text = between(prompt, "<text>", "</text>")
        said = sentences(text)
        names = []
        for w in re.findall(r"\b[A-Z][a-z]{2,}(?:\s[A-Z][a-z]+)*|\b[A-Z]+-\d+\b", text):
            if w not in names and w.split()[0] not in ("The", "This", "That", "It", "In", "On", "A"):
                names.append(w)
        return {
            "summary": " ".join(said[:2])[:500] or text[:200],
            "content_types": ["Reference documentation"],
            "critical_actions": [s[:130] for s in said if re.search(r"\b(must|should|todo|will)\b", s, re.I)][
                :2
            ],
            "decisions": [s[:130] for s in said if re.search(r"\bdecided|chose|agreed\b", s, re.I)][:2],
            "noteworthy_events": [],
            "about": names[:10],
        }

    def _branch_meta(self, prompt: str, request: Request) -> dict[str, Any]:
        summaries = re.findall(r"Summary: (.*)", prompt)
        return {
            "summary": " ".join(s.split(". ")[0] for s in summaries)[:650] or "A section.",
            "critical_actions": [],
            "decisions": [],
            "noteworthy_events": [],
        }

    def _decompose(self, prompt: str, request: Request) -> dict[str, Any]:
        question = prompt.split("Question:", 1)[-1].strip()
        pieces = [p.strip(" ?") for p in re.split(r"\band\b|;", question) if p.strip(" ?")]
        return {"parts": [p + "?" for p in pieces[:3]] or [question]}

    def _choose(self, prompt: str, request: Request) -> dict[str, Any]:
        question = re.search(r"Question: (.*)", prompt)
        wanted = words(question.group(1) if question else "")
        missing = re.search(r"Still missing: (.*)", prompt)
        if missing:
            wanted = words(missing.group(1))
        blocks = re.split(r"^Option \d+:\s*$", prompt, flags=re.M)[1:]
        scores = [len(wanted & words(b)) for b in blocks]
        best = max(range(len(blocks)), key=lambda i: (scores[i], -i)) if blocks else 0
        return {"reason": f"option {best} shares {scores[best] if blocks else 0} words", "choice": best}

    def _read(self, prompt: str, request: Request) -> dict[str, Any]:
        text = between(prompt, "<text>", "</text>")
        said = sentences(text)
        out: dict[str, Any] = {}
        for key, part in re.findall(r"^(part_\d+): (.*)$", prompt, flags=re.M):
            wanted = words(part)
            best, score = "", 0
            for s in said:
                overlap = len(wanted & words(s))
                if overlap > score:
                    best, score = s, overlap
            if wanted and score / len(wanted) >= 0.5:
                out[key] = {"found": True, "quote": best, "answer": best}
            else:
                out[key] = {"found": False, "quote": "", "answer": ""}
        return out

    def _combine(self, prompt: str, request: Request) -> dict[str, Any]:
        answers = re.findall(r"→ (.*?) \(source says", prompt)
        return {"answer": " ".join(answers) or "no findings"}

    # -- evaluation baselines (eval_answer, raptor_summary, judge prompts) -----------------------
    def _answer(self, prompt: str, request: Request) -> dict[str, Any]:
        """The sentence of the text sharing most words with the question (an option letter if it has options)."""
        text = between(prompt, "<text>", "</text>")
        question = prompt.split("Question:", 1)[-1].split("\n\nReply", 1)[0]
        wanted = words(question.split("\n(A)", 1)[0])
        best = max(sentences(text), key=lambda s: len(wanted & words(s)), default="")
        if not best or not wanted & words(best):
            return {"answer": "unknown"}
        options = re.findall(r"^\(([A-D])\) (.*)$", question, flags=re.M)
        if options:
            letter, option = max(options, key=lambda o: len(words(o[1]) & words(best)))
            return {"answer": f"({letter}) {option}"}
        return {"answer": best[:300]}

    def _raptor_summary(self, prompt: str, request: Request) -> dict[str, Any]:
        text = between(prompt, "<passages>", "</passages>")
        return {"summary": " ".join(s.split(". ")[0] for s in text.split("\n\n") if s.strip())[:800] or "-"}

    def _judge(self, prompt: str, request: Request) -> dict[str, Any]:
        gold = words(between(prompt, "Gold answer:", "\n"))
        said = words(between(prompt, "Answer to grade:", "\n"))
        share = len(gold & said) / len(gold) if gold else 0.0
        return {"reason": f"{share:.0%} of the gold answer's words", "correct": share >= 0.5}

    def _nav_judge(self, prompt: str, request: Request) -> dict[str, Any]:
        """`--mode nav`'s judge: "yes" for a candidate sharing half the question's words, "partly" for one."""
        wanted = words(prompt.split("Question:", 1)[-1].split("\n", 1)[0])
        out = {}
        for number, text in re.findall(r"^\[(\d+)\] (.*)$", prompt, flags=re.M):
            shared = len(wanted & words(text))
            out[number] = "yes" if wanted and shared * 2 >= len(wanted) else "partly" if shared else "no"
        return out

    # -- conversation memories (knowtree.construct.conversation, knowtree.answer.memory/agent) ----
    @staticmethod
    def _message_lines(text: str) -> list[tuple[int, str]]:
        return [(int(n), body) for n, body in re.findall(r"^\[(\d+)\] (.*)$", text, flags=re.M)]

    def _topic(self, prompt: str, request: Request) -> dict[str, Any]:
        new = between(prompt, "New messages:", "Options:")
        recent = between(prompt, "Last messages of the current topic:", "New messages:")
        options = re.findall(r"^(\d+): (.*)$", between(prompt, "Options:", "Reply with:"), flags=re.M)
        shared = len(words(new) & words(recent))
        choice = 1 if options and "continue" in options[0][1] and shared >= 3 else len(options)
        lines = [body for _, body in self._message_lines(new)]
        long_words = [w for w in WORD.findall(new) if w.lower() not in STOPWORDS and len(w) > 3]
        names = list(dict.fromkeys(re.findall(r"\b[A-Z][a-z]{2,}\b", new)))
        return {
            "choice": choice,
            "name": " ".join(long_words[2:6]) or "chat",
            "summary": " ".join(lines[:2])[:300] or "messages",
            "events": [],
            "about": names[:6],
        }

    def _topic_merge(self, prompt: str, request: Request) -> dict[str, Any]:
        parts = re.findall(r"^Part \d+ — (.*?) \((.*?)\): (.*)$", prompt, flags=re.M)
        return {
            "name": parts[0][0] if parts else "conversation",
            "summary": " ".join(p[2].split(". ")[0] for p in parts)[:450] or "A conversation.",
            "events": [],
        }

    def _memory_choose(self, prompt: str, request: Request) -> dict[str, Any]:
        question = re.search(r"Question: (.*)", prompt)
        wanted = words(question.group(1) if question else "")
        shown = between(prompt, "in time order:", "Which part")
        blocks = re.findall(r"^(\d+): (.*?)(?=^\d+: |\Z)", shown, re.M | re.S)
        scored = [(len(wanted & words(body)), -int(n), int(n)) for n, body in blocks if n != "0"]
        best = max(scored)[2] if scored else 1
        return {"reason": f"part {best} shares the most words", "choice": best}

    def _memory_answer(self, prompt: str, request: Request) -> dict[str, Any]:
        question = prompt.rsplit("Question:", 1)[-1].split("Rules:")[0]
        wanted = words(question)
        best, score = None, 0
        for n, body in self._message_lines(between(prompt, "Messages:", "Question:")):
            overlap = len(wanted & words(body))
            if overlap > score or (overlap == score and overlap and best is not None and n > best[0]):
                best, score = (n, body), overlap
        if best is None or not wanted or score / len(wanted) < 0.34:
            return {"found": False, "answer": "", "messages": [], "superseded": []}
        # the answer is the message's sentence sharing most words with the question (its first on ties)
        body = best[1].split("): ", 1)[-1]
        sentence = max(sentences(body) or [body], key=lambda s: len(wanted & words(s)))
        return {"found": True, "answer": sentence[:280], "messages": [best[0]], "superseded": []}

    def _memory_agent(self, prompt: str, request: Request) -> dict[str, Any]:
        question = re.search(r"^Question: (.*)$", prompt, flags=re.M)
        wanted = words(question.group(1) if question else "")
        seen = between(prompt, "What you have seen so far:", "Step ")
        lines = self._message_lines(seen)
        if lines:
            n, body = max(lines, key=lambda x: (len(wanted & words(x[1])), x[0]))
            if wanted and len(wanted & words(body)) / len(wanted) >= 0.34:
                return {"tool": "answer", "answer": body.split("): ", 1)[-1][:280], "messages": [n]}
        read = {(int(a), int(b)) for a, b in re.findall(r"read (\d+)-(\d+)", seen)}
        viewed = set(re.findall(r"view ([0-9a-f]{6,})", seen))
        kids = re.findall(r"^- ([0-9a-f]{6,}) \[(\d+)-(\d+)\] (.*)$", seen, flags=re.M)
        ranked = sorted(kids, key=lambda k: -len(wanted & words(k[3])))
        for nid, a, b, _ in ranked:
            if "messages" in _ and (int(a), int(b)) not in read:
                return {"tool": "read", "start": int(a), "end": int(b)}
            if nid not in viewed and "messages" not in _:
                return {"tool": "view", "node": nid}
        return {"tool": "answer", "answer": "", "messages": []}


class SlowKeywordModel(KeywordModel):
    """The keyword model taking `delay` seconds per call: long builds and imports for crash and
    concurrency tests without a real model (`--model slow` or `slow:SECONDS`). Its id does not
    depend on the delay, so runs with different delays share the cache."""

    def __init__(self, delay: float = 0.05) -> None:
        super().__init__()
        self.id = "keyword-slow"
        self.delay = delay

    def reply(self, request: Request) -> dict[str, Any]:
        time.sleep(self.delay)
        return super().reply(request)


def keyword_model(spec: ModelSpec) -> KeywordModel:
    """The `keyword` (or `test`) model string's factory (see `knowtree.llm.registry`). Priced as the
    settings say, as a remote model is (so cost caps can be tried without one)."""
    model = KeywordModel()
    # as many calls at once as the settings allow, like a remote model's adapter (the class's own 4
    # would cap `--concurrency 8` at 4 without a word)
    model.max_concurrency = spec.settings.concurrency
    model.input_cost_per_mtok = spec.settings.input_cost_per_mtok
    model.output_cost_per_mtok = spec.settings.output_cost_per_mtok
    return model


def slow_model(spec: ModelSpec) -> SlowKeywordModel:
    """The `slow` / `slow:SECONDS` model string's factory."""
    try:
        delay = float(spec.name) if spec.name else 0.05
    except ValueError:
        raise ConfigError(f"model {spec.spec!r}: write slow or slow:SECONDS, e.g. slow:0.2") from None
    model = SlowKeywordModel(delay)
    model.max_concurrency = spec.settings.concurrency  # it stands in for a remote model: no cap of its own
    return model
