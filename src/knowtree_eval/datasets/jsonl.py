"""Generic JSONL: one question per line, with its documents (or a corpus named by an earlier line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from knowtree.errors import InputError
from knowtree.retrieve.bm25 import fingerprint
from knowtree_eval.datasets.base import DEFAULT_CHUNK_CHARS, Case, Corpus, Dataset
from knowtree_eval.datasets.read import (
    chunk_passages,
    jsonl_objects,
    keep_known_evidence,
    limit_cases,
    need,
    prune,
)


def load_jsonl(
    path: str | Path, *, limit: int | None = None, chunk_chars: int = DEFAULT_CHUNK_CHARS
) -> Dataset:
    """One question per line: `{id?, question, answer?, options?, gold?, evidence?, documents | corpus}`.

    `documents` is a list of `{id, text}` objects or of strings (ids `doc0`, `doc1`…), or an object
    id → text. Lines with the same documents share a corpus (named by `corpus`, else by a hash of the
    documents), and a later line may give just `corpus` to reuse one defined earlier. Documents longer
    than `chunk_chars` are cut into passages `doc#i`; `evidence` may name documents or passages.
    `options` (list of texts) with `gold` (a letter) makes a multiple-choice question.
    """
    p = Path(path)
    cases: list[Case] = []
    corpora: dict[str, Corpus] = {}
    for n, obj in jsonl_objects(p):
        where = f"line {n}"
        question = need(obj, "question", p, where)
        docs = obj.get("documents")
        name = obj.get("corpus")
        if docs is None:
            if not name or str(name) not in corpora:
                raise InputError(str(p), f"{where}: needs 'documents' (or 'corpus' naming an earlier line's)")
            cid = str(name)
        else:
            pairs = _documents(docs, p, where)
            cid = str(name) if name else "c" + fingerprint(pairs)[:12]
            if cid not in corpora:
                corpus = Corpus(cid)
                for doc_id, text in pairs:
                    for passage in chunk_passages(doc_id, text, chunk_chars):
                        corpus.add(passage)
                corpora[cid] = corpus
        options = obj.get("options")
        if options is not None and (
            not isinstance(options, list) or not all(isinstance(o, str) for o in options)
        ):
            raise InputError(str(p), f"{where}: 'options' should be a list of strings")
        gold = obj.get("gold", obj.get("label"))
        if options and gold is not None:
            gold = str(gold).strip().strip("()").upper()[:1]
            if not gold or not ("A" <= gold < chr(65 + len(options))):
                raise InputError(str(p), f"{where}: 'gold' should be a letter A–{chr(64 + len(options))}")
        answer = obj.get("answer")
        if answer is None and options and gold:
            answer = options[ord(gold) - 65]
        evidence = obj.get("evidence") or []
        if not isinstance(evidence, list):
            evidence = [evidence]
        cases.append(
            Case(
                id=str(obj.get("id") or f"line{n}"),
                question=question,
                corpus=cid,
                answer=None if answer is None else str(answer),
                options=options or None,
                gold_letter=gold if options else None,
                evidence=[str(e) for e in evidence],
                category=None if obj.get("category") is None else str(obj["category"]),
            )
        )
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(str(p), f"question id {dup!r} appears more than once (ids must be unique)")
    ds = Dataset("jsonl", str(p), limit_cases(cases, limit), corpora)
    keep_known_evidence(ds)
    return prune(ds)


def _documents(docs: Any, p: Path, where: str) -> list[tuple[str, str]]:
    if isinstance(docs, dict):
        pairs = [(str(k), v) for k, v in docs.items()]
    elif isinstance(docs, list):
        pairs = []
        for i, d in enumerate(docs):
            if isinstance(d, str):
                pairs.append((f"doc{i}", d))
            elif isinstance(d, dict) and "text" in d:
                pairs.append((str(d.get("id", f"doc{i}")), d["text"]))
            else:
                raise InputError(str(p), f"{where}: document {i} should be a string or {{id, text}}")
    else:
        raise InputError(str(p), f"{where}: 'documents' should be a list or an object")
    for doc_id, text in pairs:
        if not isinstance(text, str):
            raise InputError(str(p), f"{where}: document {doc_id!r} text should be a string")
    return pairs
