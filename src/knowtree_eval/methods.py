"""Methods under evaluation, by name: the registry the command line picks from (`--method bm25,walk`).

Methods are registered by name (`register_method`); the built-in ones are the retrieval baselines
(`retrieval.py`: whole passages; `flatpieces.py`: the tree's pieces, `flat-*`), `tree`
(`treemethod.py`), `nav` (`navmethod.py`) and the LLM methods
(`llm_methods.py`, loaded on first use). Every method module imports only downward (`base.py`,
`scoring.py`); this module sits on top of them and re-exports what a method author needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from knowtree.errors import UserError
from knowtree_eval.base import CorpusContext, Method, MethodFactory, MethodParams, Record
from knowtree_eval.flatpieces import factories as flat_factories
from knowtree_eval.retrieval import BM25Method, EmbeddingMethod, HybridMethod
from knowtree_eval.scoring import (
    BUDGETS,
    account,
    answer_metrics,
    base_record,
    evidence_labels,
    read_metrics,
    retrieval_metrics,
)

_FACTORIES: dict[str, MethodFactory] = {
    "bm25": lambda p: BM25Method(k=p.k, budget=p.budget, answer=p.answer),
    "embedding": lambda p: EmbeddingMethod(k=p.k, budget=p.budget, answer=p.answer),
    "hybrid": lambda p: HybridMethod(k=p.k, budget=p.budget, answer=p.answer),
    "tree": lambda p: _tree_method(p),
    "tree-summarized": lambda p: _tree_method(p, summarize=True),
    "retrieve": lambda p: _tree_method(p, answer=True),
    "retrieve-summarized": lambda p: _tree_method(p, summarize=True, answer=True),
    "nav": lambda p: _nav_method(p),
    "nav-judge": lambda p: _nav_method(p, judge_only=True),
    "nav-summarized": lambda p: _nav_method(p, summarize=True),
    "nav-overview": lambda p: _nav_method(p, overview=True),
    # a search per multiple-choice option is `nav`'s default now; the old name stays for recorded commands
    "nav-options": lambda p: _nav_method(p, name="nav-options"),
    "nav-one-query": lambda p: _nav_method(p, choices=False, name="nav-one-query"),
    # same-unit baselines: BM25 / dense / fused rankings over the tree's own pieces (`flatpieces.py`)
    **flat_factories(),
}


def _nav_method(p: MethodParams, **options: Any) -> Method:
    """`navmethod.nav_method(p, **options)`, loaded on first use, once the summarizing forms have
    checked that the run has a model."""
    from knowtree_eval.navmethod import nav_method

    if options.get("summarize") or options.get("overview"):
        _need_model("nav-overview" if options.get("overview") else "nav-summarized", p)
    return nav_method(p, **options)


def _need_model(name: str, p: MethodParams) -> None:
    if not p.answer:
        raise UserError(f"method {name} needs a model: add --model (e.g. --model local)")


def _tree_method(p: MethodParams, *, summarize: bool = False, answer: bool = False) -> Method:
    """`tree` (LLM-free), on the model-summarized tree (`-summarized`: the model writes the inner nodes'
    metadata once per corpus), and `retrieve`: the same ranking answered in one call."""
    from knowtree_eval.treemethod import TreeMethod

    name = ("retrieve" if answer else "tree") + ("-summarized" if summarize else "")
    if summarize or answer:
        _need_model(name, p)
    return TreeMethod(k=p.k, budget=p.budget, name=name, summarize=summarize, answer=answer)


# reserved names, with what they will be: asking for one now says it is not implemented yet
PLANNED: dict[str, str] = {}
_BUILTIN_LOADED = False


def _load_builtin() -> None:
    """Register the LLM methods (`llm_methods.py`) on first use: importing this module stays light."""
    global _BUILTIN_LOADED
    if not _BUILTIN_LOADED:
        _BUILTIN_LOADED = True
        from knowtree_eval.llm_methods import FACTORIES

        for name, factory in FACTORIES.items():
            register_method(name, factory)


def register_method(name: str, factory: MethodFactory, *, replace: bool = False) -> None:
    """Make `name` selectable with `--method` (e.g. `register_method("walk", lambda p: WalkMethod(p))`)."""
    if name in _FACTORIES and not replace:
        raise ValueError(f"method {name!r} is already registered")
    _FACTORIES[name] = factory


def available_methods() -> list[str]:
    _load_builtin()
    return sorted(_FACTORIES)


def parse_methods(spec: str | Sequence[str]) -> list[str]:
    """Method names from "bm25,walk" or ["bm25", "walk"]: distinct names in order; each checked against the registry."""
    parts = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    names = list(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))
    if not names:
        raise UserError(f"no method given (available: {', '.join(available_methods())})")
    for name in names:
        _check(name)
    return names


def _check(name: str) -> None:
    _load_builtin()
    if name in _FACTORIES:
        return
    available = ", ".join(available_methods())
    planned = [p for p in PLANNED if p not in _FACTORIES]
    if name in PLANNED:
        raise UserError(f"method {name!r} is not implemented yet (available: {available})")
    later = f"; planned: {', '.join(planned)}" if planned else ""
    raise UserError(f"unknown method {name!r} (available: {available}{later})")


def make_method(name: str, params: MethodParams | None = None) -> Method:
    _check(name)
    return _FACTORIES[name](params or MethodParams())


__all__ = [
    "BUDGETS",
    "PLANNED",
    "BM25Method",
    "CorpusContext",
    "EmbeddingMethod",
    "HybridMethod",
    "Method",
    "MethodFactory",
    "MethodParams",
    "Record",
    "account",
    "answer_metrics",
    "available_methods",
    "base_record",
    "evidence_labels",
    "make_method",
    "parse_methods",
    "read_metrics",
    "register_method",
    "retrieval_metrics",
]
