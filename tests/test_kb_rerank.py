"""The optional model rerank of a KB query's top issues (`answer/kb_rerank.py`): yes/no grades read
from log-probabilities, the words when a backend reports none, a malformed reply keeping the order,
and `KB.ask(rerank=True)` end to end with the keyword model. Scripted models, invented data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import knowtree
from conftest import tiny_tv_kb
from knowtree.answer.kb import Accepted, hybrid_retrieve
from knowtree.answer.kb_rerank import PURPOSE, RerankOptions, rerank
from knowtree.core import KnowTree
from knowtree.llm.base import Completion, Request, TokenLogprob
from knowtree.retrieve import Passage
from knowtree.retrieve.kbindex import KBIndexes
from knowtree.store.kb import KBIssue
from knowtree.testing.models import FunctionModel

ISSUES = {
    "a": KBIssue("a", "parent", None, "ca", "The remote does not pair with the TV", {}),
    "b": KBIssue("b", "parent", None, "cb", "The remote buttons do nothing", {}),
    "c": KBIssue("c", "parent", None, "cc", "The picture is too dark", {}),
}
TEXTS = {
    "a": ["The remote does not pair with the TV", "pairing fails every time"],
    "b": ["The remote buttons do nothing", "remote stopped working after new batteries"],
    "c": ["The picture is too dark"],
}
QUERY = "my remote stopped working after I changed the batteries"


def _accepted() -> list[Accepted]:
    idx = KBIndexes(":memory:", "t", "hash")
    idx.add("issues", [Passage(i.id, i.title) for i in ISSUES.values()])
    got = hybrid_retrieve(QUERY, {}, ISSUES, idx, k=3)
    assert len(got) == 3
    return got


def _tok(token: str, top: dict[str, float] | None = None) -> TokenLogprob:
    alternatives = list((top or {token: 0.0}).items())
    return TokenLogprob(token=token, logprob=alternatives[0][1], top=alternatives)


def _graded(p_yes: dict[str, float]) -> Completion:
    """A reply `{"1": "..", ...}` whose grade tokens carry P(yes) / P(no) as alternatives."""
    tokens = [_tok("{")]
    for n, (number, p) in enumerate(p_yes.items()):
        top = (
            {"yes": math.log(p), "no": math.log(1 - p)}
            if p >= 0.5
            else {"no": math.log(1 - p), "yes": math.log(p)}
        )
        tokens += [_tok(", " if n else ""), _tok(f'"{number}": "'), _tok(next(iter(top)), top), _tok('"')]
    tokens.append(_tok("}"))
    return Completion(text="".join(t.token for t in tokens), logprobs=tokens)


def _run(tmp_path: Path, reply: Completion | str, trace: list[dict]) -> tuple[list[Accepted], list[Request]]:
    accepted = _accepted()
    model = FunctionModel(lambda r: reply, id="scripted-rerank")
    with KnowTree(tmp_path / "r.db", model=model) as kt:
        out = rerank(kt.client(), QUERY, accepted, TEXTS, domain="tv", trace=trace)
    return [accepted.index(a) for a in out], model.requests


def test_yes_probabilities_reorder_the_top(tmp_path: Path) -> None:
    accepted = _accepted()
    order = [a.issue.id for a in accepted]
    # the model is sure the candidate in third place is the user's issue
    p = {"1": 0.3, "2": 0.2, "3": 0.9}
    trace: list[dict] = []
    got, requests = _run(tmp_path, _graded(p), trace)
    assert got == [2, 0, 1]
    request = requests[0]
    assert request.logprobs == RerankOptions().top_logprobs and request.schema_name == PURPOSE
    assert request.schema_ is not None and request.schema_["properties"]["1"]["enum"] == ["yes", "no"]
    prompt = request.messages[-1].content
    assert prompt.startswith(f"Question: {QUERY}") and "remote stopped working after new batteries" in prompt
    step = next(s for s in trace if s["step"] == "rerank")
    assert step["candidates"] == order and abs(step["grades"][2] - 0.9) < 1e-6


def test_words_count_without_logprobs_and_equal_grades_keep_the_order(tmp_path: Path) -> None:
    got, _ = _run(tmp_path, json.dumps({"1": "no", "2": "yes", "3": "no"}), [])
    assert got == [1, 0, 2]
    (tmp_path / "same").mkdir()
    got, _ = _run(tmp_path / "same", json.dumps({"1": "yes", "2": "yes", "3": "yes"}), [])
    assert got == [0, 1, 2]


def test_a_malformed_reply_keeps_the_order_and_says_so(tmp_path: Path) -> None:
    trace: list[dict] = []
    got, _ = _run(tmp_path, "I think number two", trace)
    assert got == [0, 1, 2]
    assert "malformed" in next(s for s in trace if s["step"] == "rerank")["error"]


def test_kb_ask_reranks_with_the_keyword_model(tmp_path: Path) -> None:
    texts = [
        ("b1", "the battery drains fast"),
        ("p1", "remote will not pair"),
        ("d1", "picture too dark at night"),
    ]
    inputs = tiny_tv_kb(tmp_path, texts, [("pair", "Pairing", "To pair the remote hold Back and Play.")])
    with knowtree.open(tmp_path / "kb.db", model="keyword") as kt:
        kb = kt.kb("tv", embedder="hash")
        kb.build(**inputs)
        plain = kb.ask("remote will not pair", metadata="none", solve=False)
        graded = kb.ask("remote will not pair", metadata="none", solve=False, rerank=True)
    assert not any(s["step"] == "rerank" for s in plain.trace)
    step = next(s for s in graded.trace if s["step"] == "rerank")
    assert len(step["grades"]) == len(step["candidates"]) >= 2
    assert graded.issue is not None and graded.issue.id == plain.issue.id  # type: ignore[union-attr]


def test_kb_ask_rerank_flag_on_the_command_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from knowtree.cli.app import app

    texts = [("b1", "the battery drains fast"), ("p1", "remote will not pair"), ("d1", "picture too dark")]
    inputs = tiny_tv_kb(tmp_path, texts, [("pair", "Pairing", "To pair the remote hold Back and Play.")])
    with knowtree.open(tmp_path / "kb.db", model="keyword") as kt:
        kt.kb("tv", embedder="hash").build(**inputs)
    args = ["kb", "ask", "tv", "remote will not pair", "--db", str(tmp_path / "kb.db"), "--model", "keyword"]
    args += ["--metadata", "none", "--no-solution", "--json"]
    plain = CliRunner().invoke(app, args)
    graded = CliRunner().invoke(app, [*args, "--rerank"])
    assert plain.exit_code == 0 and graded.exit_code == 0, (plain.output, graded.output)
    steps = [s["step"] for s in json.loads(graded.stdout)["trace"]]
    assert "rerank" in steps and "rerank" not in [s["step"] for s in json.loads(plain.stdout)["trace"]]
