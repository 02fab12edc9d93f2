"""Log-probabilities of reply tokens: the request field, both adapters, the cache, and the nav judge's
soft grades read from them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import httpx

from conftest import write_corpus
from knowtree.answer.nav import NavOptions, judge, soft_grades, units_of
from knowtree.core import KnowTree
from knowtree.llm.adapters.local import LogitTap
from knowtree.llm.adapters.openai_compat import OpenAIModel
from knowtree.llm.base import Completion, Message, Model, Request, TokenLogprob
from knowtree.retrieve.treeindex import TreeIndex
from knowtree.retrieve.treesearch import DOCUMENT_PARAMS, rank_tree, shape_of
from knowtree.testing.models import FunctionModel


def _tok(token: str, top: dict[str, float] | None = None) -> TokenLogprob:
    alternatives = list((top or {token: 0.0}).items())
    return TokenLogprob(token=token, logprob=alternatives[0][1], top=alternatives)


def _reply(grades: list[dict[str, float]]) -> list[TokenLogprob]:
    """Tokens of `{"1": "<g>", "2": ...}` as Qwen splits them, the grade token carrying `top`."""
    out = [_tok("{")]
    for n, top in enumerate(grades, 1):
        chosen = max(top, key=lambda k: top[k])
        out += [
            _tok(' "'),
            _tok(str(n)),
            _tok('":'),
            _tok(' "'),
            _tok(chosen, top),
            _tok('",' if n < len(grades) else '"'),
        ]
    return [*out, _tok("}")]


def test_request_cache_key_only_changes_when_logprobs_are_asked() -> None:
    messages = [Message(role="user", content="q")]
    plain = Request(messages=messages)
    assert plain.cache_key("m") == Request(messages=messages, logprobs=0).cache_key("m")
    assert plain.cache_key("m") != Request(messages=messages, logprobs=5).cache_key("m")


def test_soft_grades_are_the_expected_grade_under_the_models_distribution() -> None:
    p = {"yes": 0.6, "Yes": 0.2, "no": 0.1, "part": 0.1}  # yes 0.8, partly 0.1, no 0.1
    q = {"no": 0.5, "partly": 0.3, " yes": 0.1, "none": 0.1}  # "none" is no grade word
    tokens = _reply(
        [
            {k: math.log(v) for k, v in p.items()},
            {k: math.log(v) for k, v in q.items()},
        ]
    )
    assert "".join(t.token for t in tokens) == '{ "1": "yes", "2": "no"}'
    grades = soft_grades(tokens)
    assert abs(grades["1"] - (0.8 * 1 + 0.1 * 0.5) / 1.0) < 1e-9
    assert abs(grades["2"] - (0.3 * 0.5 + 0.1 * 1) / 0.9) < 1e-9


def test_soft_grades_read_a_grade_fused_with_its_quote_and_skip_tokens_without_grade_words() -> None:
    tokens = [
        _tok('{"1":'),
        _tok('"yes', {'"yes': -0.1, '"no': -2.5}),
        _tok('","2":'),
        _tok('"', {'"': 0.0}),
        _tok("}"),
    ]
    grades = soft_grades(tokens)
    assert set(grades) == {"1"} and 0.9 < grades["1"] < 1.0


class _Scripted(Model):
    id = "scripted-logprobs"

    def __init__(self, completion: Completion) -> None:
        self.completion = completion
        self.requests: list[Request] = []

    def complete(self, request: Request) -> Completion:
        self.requests.append(request)
        return self.completion


def test_the_judge_asks_for_logprobs_and_uses_soft_grades_through_the_cache(tmp_path: Path) -> None:
    write_corpus(tmp_path / "docs")
    kt = KnowTree(tmp_path / "kb.db", model=FunctionModel(lambda r: {}, id="none"), summaries="none")
    with kt:
        kt.build([str(p) for p in sorted((tmp_path / "docs").iterdir())], tree="t")
        index = TreeIndex(kt.store, "t")
        shape = shape_of(index)
        ranking = rank_tree(
            index, "Who approved the marketing budget?", embedder=None, params=DOCUMENT_PARAMS, shape=shape
        )
        rows = {r.id: r for r in index.rows}
        units = units_of(ranking, rows)[:2]
        tokens = _reply([{"yes": -0.7, "no": -0.7}, {"no": -0.1, "yes": -2.4}])
        text = "".join(t.token for t in tokens)
        model = _Scripted(Completion(text=text, logprobs=tokens))
        first = KnowTree(tmp_path / "j.db", model=model)
        with first:
            grades, step, _, _ = judge(first.client(), "q", units, rows, NavOptions())
            again, _, _, _ = judge(first.client(), "q", units, rows, NavOptions())
            hard, _, _, _ = judge(first.client(), "q", units, rows, NavOptions(soft=False))
    assert model.requests[0].logprobs == NavOptions().top_logprobs and model.requests[-1].logprobs == 0
    assert len(model.requests) == 2  # the repeat came from the cache, logprobs included
    assert abs(grades[units[0].node] - 0.5) < 1e-9 and 0.05 < grades[units[1].node] < 0.15
    assert again == grades
    assert hard == {units[0].node: 1.0, units[1].node: 0.0}  # the words alone
    assert "[1] yes p=0.50" in step.reason


def test_logit_tap_records_raw_top_alternatives_per_generated_token() -> None:
    import numpy as np

    tap = LogitTap(top=2)
    vocab = {0: "a", 1: "b", 2: "c"}
    tap([7, 8], np.log(np.array([0.7, 0.2, 0.1])))  # prompt of 2 tokens, first reply token
    tap([7, 8, 0], np.log(np.array([0.1, 0.3, 0.6])))
    tap([7, 8, 0, 2], np.log(np.array([0.5, 0.25, 0.25])))  # the last step: its token never evaluated
    out = tap.tokens([0, 2], lambda t: vocab[t])
    assert [t.token for t in out] == ["a", "c"]
    assert [a for a, _ in out[0].top] == ["a", "b"] and abs(out[0].logprob - np.log(0.7)) < 1e-9
    assert abs(out[1].logprob - np.log(0.6)) < 1e-9


def _openai(handler: Any) -> OpenAIModel:
    return OpenAIModel(
        "m", base_url="http://llm.test/v1", http_client=httpx.Client(transport=httpx.MockTransport(handler))
    )


def _body(logprobs: bool) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": "yes"},
        "finish_reason": "stop",
    }
    if logprobs:
        choice["logprobs"] = {
            "content": [
                {
                    "token": "yes",
                    "logprob": -0.2,
                    "top_logprobs": [{"token": "yes", "logprob": -0.2}, {"token": "no", "logprob": -1.7}],
                }
            ]
        }
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}


def test_openai_adapter_asks_for_and_reads_logprobs_and_drops_them_when_refused() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        return httpx.Response(200, json=_body(True))

    request = Request(messages=[Message(role="user", content="q")], logprobs=30)
    completion = _openai(handler).complete(request)
    assert seen[0]["logprobs"] is True and seen[0]["top_logprobs"] == 20
    assert completion.logprobs is not None and completion.logprobs[0].top == [("yes", -0.2), ("no", -1.7)]
    _openai(handler).complete(Request(messages=[Message(role="user", content="q")]))
    assert "logprobs" not in seen[1]

    refused: list[dict[str, Any]] = []

    def strict(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        refused.append(body)
        if "logprobs" in body:
            return httpx.Response(
                400, json={"error": {"message": "logprobs is not supported for this model"}}
            )
        return httpx.Response(200, json=_body(False))

    completion = _openai(strict).complete(request)
    assert [("logprobs" in b) for b in refused] == [True, False] and completion.logprobs is None
