"""FinanceBench: free-form questions over SEC filings, one passage per page."""

from __future__ import annotations

from pathlib import Path

from knowtree.errors import InputError
from knowtree.retrieve.bm25 import Passage
from knowtree_eval.datasets.base import Case, Corpus, Dataset
from knowtree_eval.datasets.read import jsonl_objects, keep_known_evidence, limit_cases, need


def default_pages_path(questions_path: str | Path) -> Path:
    """The pages file next to a questions file: `X_questions.jsonl` → `X_pages.jsonl.gz` (or .jsonl)."""
    q = Path(questions_path)
    stem = q.name.split(".")[0]
    base = stem[: -len("_questions")] if stem.endswith("_questions") else stem
    for name in (f"{base}_pages.jsonl.gz", f"{base}_pages.jsonl", "financebench_dev_pages.jsonl.gz"):
        if (q.parent / name).exists():
            return q.parent / name
    return q.parent / f"{base}_pages.jsonl.gz"


def load_financebench(
    questions_path: str | Path,
    pages_path: str | Path | None = None,
    *,
    limit: int | None = None,
    pooled: bool = False,
) -> Dataset:
    """FinanceBench: free-form questions over SEC filings; each page is a passage `DOC#page` (0-based).

    By default each filing is its own corpus (the question names its filing, as when a tree is built
    per document); `pooled=True` puts every filing in one corpus (the harder "shared store" setting).
    Only the filings the (limited) questions need are read from the pages file.
    """
    qp = Path(questions_path)
    pp = Path(pages_path) if pages_path else default_pages_path(qp)
    cases: list[Case] = []
    for n, obj in jsonl_objects(qp):
        where = f"line {n}"
        doc = need(obj, "doc_name", qp, where)
        evidence = []
        for e in obj.get("evidence") or []:
            if not isinstance(e, dict) or "evidence_page_num" not in e:
                raise InputError(str(qp), f"{where}: evidence entries need doc_name and evidence_page_num")
            evidence.append(f"{e.get('doc_name') or doc}#{int(e['evidence_page_num'])}")
        cases.append(
            Case(
                id=str(obj.get("financebench_id") or f"line{n}"),
                question=need(obj, "question", qp, where),
                corpus="financebench" if pooled else doc,
                answer=None if obj.get("answer") is None else str(obj["answer"]),
                evidence=list(dict.fromkeys(evidence)),
                category=obj.get("question_type"),
                meta={"doc_name": doc, "company": obj.get("company")},
            )
        )
    cases = limit_cases(cases, limit)
    needed = {c.meta["doc_name"] for c in cases}
    if pooled:  # evidence in another filing can only be found when that filing is searched too
        needed |= {e.rsplit("#", 1)[0] for c in cases for e in c.evidence}
    if not pp.exists():
        raise InputError(str(pp), "FinanceBench pages file not found (give it with --pages)")
    corpora: dict[str, Corpus] = {}
    for n, obj in jsonl_objects(pp):
        doc = need(obj, "doc_name", pp, f"line {n}")
        if doc not in needed:
            continue
        pages = need(obj, "pages", pp, f"line {n} ({doc})", list)
        corpus = corpora.setdefault(
            "financebench" if pooled else doc, Corpus("financebench" if pooled else doc)
        )
        for i, page in enumerate(pages):
            corpus.add(Passage(id=f"{doc}#{i}", text=str(page), doc=doc, meta={"page": i}))
    missing = sorted({c.corpus for c in cases} - set(corpora))
    if missing:
        raise InputError(str(pp), f"no pages for {', '.join(missing[:5])} (needed by the questions)")
    ds = Dataset("financebench", str(qp), cases, corpora)
    keep_known_evidence(ds)
    return ds
