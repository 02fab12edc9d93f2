"""HotpotQA distractor: every paragraph pooled in one corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from knowtree.errors import InputError
from knowtree.retrieve.bm25 import Passage
from knowtree_eval.datasets.base import Case, Corpus, Dataset
from knowtree_eval.datasets.read import keep_known_evidence, limit_cases, need, read_json


def load_hotpotqa(path: str | Path, *, limit: int | None = None) -> Dataset:
    """HotpotQA distractor: every paragraph of every question pooled into ONE corpus, id = title.

    Pooling (rather than 10 paragraphs per question) makes retrieval a real search; the pool is built
    from the whole file even with `limit`, so the corpus is the same however many questions run.
    Accepts the shipped sample format (`title_a/para_a`, `title_b/para_b`, `distractors`) and the
    official one (`context: [[title, sentences]]`, `supporting_facts: [[title, i]]`).
    """
    p = Path(path)
    data = read_json(p)
    if isinstance(data, dict):
        data = data.get("data", [data])
    if not isinstance(data, list):
        raise InputError(str(p), "expected a JSON list of questions")
    corpus = Corpus("hotpotqa")
    cases: list[Case] = []

    def para(title: Any, sentences: Any, where: str) -> None:
        if not isinstance(title, str) or not isinstance(sentences, list | str):
            raise InputError(str(p), f"{where}: a paragraph is [title, [sentences]]")
        body = sentences if isinstance(sentences, str) else "".join(str(s) for s in sentences)
        corpus.add(Passage(id=title, text=f"{title}\n{body.strip()}", doc=title))

    for i, obj in enumerate(data):
        where = f"record {i} ({obj.get('_id', '?') if isinstance(obj, dict) else '?'})"
        if not isinstance(obj, dict):
            raise InputError(str(p), f"record {i}: expected an object")
        question = need(obj, "question", p, where)
        if "context" in obj:  # the official format
            for t in need(obj, "context", p, where, list):
                if not isinstance(t, list) or len(t) < 2:
                    raise InputError(str(p), f"{where}: a context entry is [title, [sentences]]")
                para(t[0], t[1], where)
            facts = obj.get("supporting_facts") or []
            gold = list(dict.fromkeys(f[0] for f in facts if isinstance(f, list) and f))
        else:
            gold = [need(obj, "title_a", p, where), need(obj, "title_b", p, where)]
            para(gold[0], need(obj, "para_a", p, where, (list, str)), where)
            para(gold[1], need(obj, "para_b", p, where, (list, str)), where)
            for d in obj.get("distractors") or []:
                if not isinstance(d, list) or len(d) < 2:
                    raise InputError(str(p), f"{where}: a distractor is [title, [sentences], score]")
                para(d[0], d[1], where)
        answer = obj.get("answer")
        cases.append(
            Case(
                id=str(obj.get("_id") or obj.get("id") or f"q{i}"),
                question=question,
                corpus=corpus.id,
                answer=None if answer is None else str(answer),
                evidence=list(dict.fromkeys(gold)),
                category=obj.get("type"),
                meta={k: obj[k] for k in ("supporting_facts", "level") if k in obj},
            )
        )
    ds = Dataset("hotpotqa", str(p), limit_cases(cases, limit), {corpus.id: corpus})
    keep_known_evidence(ds)
    return ds
