"""Evaluation harness: datasets, methods, metrics and a resumable runner with honest baselines.

    from knowtree_eval import run_eval
    summary = run_eval("hotpotqa", "hotpotqa_dev.json", "bm25", "eval-out", limit=20)

Nothing here loads a model unless a method that needs one is asked for.
A separate package beside knowtree (the `eval` extra): it may import any knowtree module below the
CLI; nothing in knowtree imports it except the `knowtree eval` command.
"""

from knowtree_eval.datasets import (
    KINDS,
    Case,
    Corpus,
    Dataset,
    load_dataset,
    load_financebench,
    load_hotpotqa,
    load_jsonl,
    load_locomo,
    load_quality,
)
from knowtree_eval.methods import (
    BM25Method,
    CorpusContext,
    Method,
    MethodParams,
    Record,
    available_methods,
    make_method,
    register_method,
)
from knowtree_eval.report import headline
from knowtree_eval.results import RESULTS, SUMMARY
from knowtree_eval.runner import run_eval
from knowtree_eval.summary import summarize

__all__ = [
    "KINDS",
    "RESULTS",
    "SUMMARY",
    "BM25Method",
    "Case",
    "Corpus",
    "CorpusContext",
    "Dataset",
    "Method",
    "MethodParams",
    "Record",
    "available_methods",
    "headline",
    "load_dataset",
    "load_financebench",
    "load_hotpotqa",
    "load_jsonl",
    "load_locomo",
    "load_quality",
    "make_method",
    "register_method",
    "run_eval",
    "summarize",
]
