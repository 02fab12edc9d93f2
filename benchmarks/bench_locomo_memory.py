"""LoCoMo benchmark for conversation memories: evidence-turn hit rate per category at a token budget.

    python benchmarks/bench_locomo_memory.py --db MEM.db --name conv-30 --conversation conv-30 \\
        --budget 400 --tree-per-category 3 --out benchmarks/results/locomo_memory_conv-30.json

The memory must have been ingested first (`knowtree chat add conv-30 locomo_dev.json --conversation
conv-30 --db MEM.db`). For every question (category 5 skipped: no answer) it measures, at the same
token budget (tokens ≈ characters / 4 for every method):

* ``bm25``: SQLite FTS5 BM25 over turns, read in rank order until the budget is full;
* ``embedding``: the shipped static embedder, cosine top-k over turns, same budget;
* ``hybrid``: the memory's own hybrid search (BM25 + embeddings over messages and topic summaries,
  reciprocal-rank fusion), no model call;
* ``tree`` (on a category-stratified subset: N questions of each category, evenly spaced in file order):
  the model walks the topic tree to one topic (its messages, counted as ``tree-nav``), then the budget
  is filled by hybrid search (``tree``); LLM calls and their tokens are recorded.

Hit = at least one gold evidence turn (dia_id) among the retrieved ones; recall = the share of them.

With ``--judge K`` it also answers the first K questions (stratified) whose evidence lies in the
memory, with the tree (`Memory.ask(mode="walk")`, the memory navigator), with the memory as an index
(`mode="retrieve"`, with ``--judge-retrieve``; same reading budget, ``--judge-budget``), with the
judged beam (`mode="nav"`; ``--judge-modes`` picks any of walk, retrieve, nav) and with the
whole conversation in one prompt (when it fits the model's context window), and has the model judge
each against the gold answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from knowtree.answer.passages import approx_tokens
from knowtree.answer.replies import MemoryReply
from knowtree.core import KnowTree
from knowtree.prompts.reply import ask
from knowtree.retrieve.bm25 import LexicalIndex, Passage
from knowtree_eval.datasets import load_locomo
from knowtree_eval.judge import judge_answer


def fill(ranked: list[str], texts: dict[str, str], budget: int) -> list[str]:
    """Read in rank order until the next item does not fit (the rule `_fill` applies to the tree)."""
    out, used = [], 0
    for pid in ranked:
        t = approx_tokens(texts[pid])
        if used + t > budget:
            break
        out.append(pid)
        used += t
    return out


def score(got: list[str], gold: list[str], texts: dict[str, str]) -> dict[str, float]:
    g = set(gold)
    return {
        "hit": float(bool(g & set(got))),
        "recall": len(g & set(got)) / len(g) if g else 0.0,
        "tokens": float(sum(approx_tokens(texts[p]) for p in got)),
    }


def stratified(cases: list[Any], per_category: int) -> list[Any]:
    """`per_category` questions of each category, evenly spaced through the file (so they come from
    the whole conversation, not its first sessions), in file order."""
    by_cat: dict[str, list[Any]] = defaultdict(list)
    for c in cases:
        by_cat[c.category].append(c)
    chosen = set()
    for group in by_cat.values():
        k = min(per_category, len(group))
        chosen.update(id(group[int((i + 0.5) * len(group) / k)]) for i in range(k))
    return [c for c in cases if id(c) in chosen]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="../shared/data/locomo_dev.json")
    ap.add_argument("--conversation", required=True, help="sample_id, e.g. conv-30")
    ap.add_argument("--db", required=True)
    ap.add_argument("--name", required=True, help="the memory's name in --db")
    ap.add_argument("--model", default="local")
    ap.add_argument("--budget", type=int, default=400)
    ap.add_argument("--tree-per-category", type=int, default=3)
    ap.add_argument(
        "--judge", type=int, default=0, help="questions to answer and judge (tree vs full context)"
    )
    ap.add_argument("--judge-retrieve", action="store_true", help="also answer with mode=retrieve")
    ap.add_argument(
        "--judge-modes",
        default=None,
        help="the modes to answer with, comma-separated, from walk, retrieve and nav (default: walk,"
        " and retrieve with --judge-retrieve); result keys: tree (walk), retrieve, nav",
    )
    ap.add_argument("--judge-budget", type=int, default=800, help="tokens of messages read per answer")
    ap.add_argument("--no-full", action="store_true", help="do not answer from the whole conversation")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    ds = load_locomo(args.data)
    kt = KnowTree(args.db, model=args.model, create=False)
    mem = kt.memory(args.name)
    rows = mem.messages()
    by_pos = {int(r["position"]): r for r in rows}
    dia = {p: str(r["source_id"]) for p, r in by_pos.items()}
    known = set(dia.values())
    cases = [c for c in ds.cases if c.corpus == args.conversation and c.evidence and set(c.evidence) <= known]
    texts = {}
    for r in rows:
        text = f"{r['name'] or r['role']}: {r['content']}"
        if r["attachment"]:
            text += f" [shares {r['attachment']}]"
        texts[str(r["source_id"])] = text
    print(f"{len(cases)} questions with evidence in the memory's {len(rows)} messages", file=sys.stderr)

    lex = LexicalIndex(":memory:", name="turns")
    lex.add([Passage(pid, t) for pid, t in texts.items()])
    from knowtree.retrieve.embed import get_embedder

    emb = get_embedder("static")
    ids = list(texts)
    matrix = emb.embed([texts[i] for i in ids])

    per_q: list[dict[str, Any]] = []
    subset = {c.id for c in stratified(cases, args.tree_per_category)}
    for n, c in enumerate(cases):
        rec: dict[str, Any] = {
            "id": c.id,
            "category": c.category,
            "question": c.question,
            "evidence": c.evidence,
        }
        rec["bm25"] = score(
            fill([p for p, _ in lex.search(c.question, 200)], texts, args.budget), c.evidence, texts
        )
        sims = matrix @ emb.embed([c.question])[0]
        order = [ids[int(j)] for j in (-sims).argsort()]
        rec["embedding"] = score(fill(order, texts, args.budget), c.evidence, texts)
        ctx = mem.context(c.question, args.budget, use_model=False)
        rec["hybrid"] = score([dia[int(m["position"])] for m in ctx], c.evidence, texts)
        if c.id in subset:
            started = time.monotonic()
            ctx = mem.context(c.question, args.budget, use_model=True)
            r = mem.last_retrieval
            got = [dia[int(m["position"])] for m in ctx]
            nav = [dia[int(m["position"])] for m in ctx if m["via"] == "tree"]
            rec["tree"] = {
                **score(got, c.evidence, texts),
                "llm_calls": r.usage.calls + r.usage.cached,
                "llm_input_tokens": r.usage.input_tokens,
                "llm_output_tokens": r.usage.output_tokens,
                "seconds": round(time.monotonic() - started, 1),
            }
            rec["tree-nav"] = score(nav, c.evidence, texts)
            print(
                f"[{n + 1}/{len(cases)}] {c.category}: tree hit {rec['tree']['hit']:.0f}",
                file=sys.stderr,
                flush=True,
            )
        per_q.append(rec)
        if c.id in subset:
            write(args, kt, rows, per_q, [])

    judged = []
    if args.judge:
        client = kt.client()
        lines = "\n".join(
            f"[{p}] {texts[dia[p]].partition(': ')[0]} ({by_pos[p]['timestamp']!s}): {texts[dia[p]].partition(': ')[2]}"
            for p in sorted(by_pos)
        )
        fits = approx_tokens(lines) + 600 < kt.model.context_window and not args.no_full
        modes = (
            [m.strip() for m in args.judge_modes.split(",")]
            if args.judge_modes
            else ["walk", *(["retrieve"] if args.judge_retrieve else [])]
        )
        if set(modes) - {"walk", "retrieve", "nav"}:
            raise SystemExit(f"--judge-modes {args.judge_modes}: use walk, retrieve and/or nav")
        for c in stratified(cases, max(1, -(-args.judge // 4)))[: args.judge]:
            row: dict[str, Any] = {
                "id": c.id,
                "category": c.category,
                "question": c.question,
                "gold": c.answer,
            }
            for key, mode in (("tree", "walk"), ("retrieve", "retrieve"), ("nav", "nav")):
                if mode not in modes:
                    continue
                started = time.monotonic()
                a = mem.ask(c.question, mode=mode, budget_tokens=args.judge_budget)
                row[key] = {
                    "answer": a.answer,
                    "status": a.status,
                    "calls": a.usage.calls + a.usage.cached,
                    "tokens": a.usage.input_tokens + a.usage.output_tokens,
                    "seconds": round(time.monotonic() - started, 1),
                    "correct": judge_answer(client, c.question, c.answer or "", a.answer).correct,
                }
            if fits:
                res = ask(
                    client,
                    MemoryReply,
                    "memory_answer",
                    context="",
                    messages=lines,
                    question=c.question,
                    purpose="memory_answer",
                    max_tokens=220,
                )
                pred = res.value.answer if res.value.found else None
                row["full"] = {
                    "answer": pred,
                    "tokens": res.usage.input_tokens + res.usage.output_tokens,
                    "correct": judge_answer(client, c.question, c.answer or "", pred).correct,
                }
            judged.append(row)
            write(args, kt, rows, per_q, judged)
            print(
                f"judged {c.id}: tree {row.get('tree', {}).get('correct')} retrieve"
                f" {row.get('retrieve', {}).get('correct')} nav {row.get('nav', {}).get('correct')} "
                f"full {row.get('full', {}).get('correct')}",
                file=sys.stderr,
            )

    write(args, kt, rows, per_q, judged)
    print(json.dumps(json.loads(Path(args.out).read_text())["summary"], indent=2))
    kt.close()
    return 0


def write(
    args: Any, kt: KnowTree, rows: list[Any], per_q: list[dict[str, Any]], judged: list[dict[str, Any]]
) -> None:
    """Summarise and write the result file (also as questions finish, so a killed run keeps them)."""
    summary: dict[str, Any] = {}
    cats = sorted({r["category"] for r in per_q})
    for method in ("bm25", "embedding", "hybrid", "tree", "tree-nav"):
        for cat in [*cats, "all"]:
            rs = [r for r in per_q if method in r and (cat == "all" or r["category"] == cat)]
            if not rs:
                continue
            summary.setdefault(method, {})[cat] = {
                "n": len(rs),
                "hit": round(sum(r[method]["hit"] for r in rs) / len(rs), 3),
                "recall": round(sum(r[method]["recall"] for r in rs) / len(rs), 3),
                "tokens": round(sum(r[method]["tokens"] for r in rs) / len(rs), 1),
                **(
                    {"llm_calls": round(sum(r[method]["llm_calls"] for r in rs) / len(rs), 2)}
                    if method == "tree"
                    else {}
                ),
            }
    # the baselines on exactly the tree's subset, for a like-for-like comparison
    sub = [r for r in per_q if "tree" in r]
    if sub:
        summary["subset"] = {
            m: {
                "n": len(sub),
                "hit": round(sum(r[m]["hit"] for r in sub) / len(sub), 3),
                "recall": round(sum(r[m]["recall"] for r in sub) / len(sub), 3),
            }
            for m in ("bm25", "embedding", "hybrid", "tree", "tree-nav")
        }
    if judged:
        summary["judged"] = {
            "n": len(judged),
            "tree_accuracy": (
                round(sum(j["tree"]["correct"] for j in judged) / len(judged), 3) if "tree" in judged[0] else None
            ),
            "full_accuracy": (
                round(sum(j["full"]["correct"] for j in judged) / len(judged), 3)
                if "full" in judged[0]
                else None
            ),
            "full_fits": "full" in judged[0],
            "retrieve_accuracy": (
                round(sum(j["retrieve"]["correct"] for j in judged) / len(judged), 3)
                if "retrieve" in judged[0]
                else None
            ),
            "nav_accuracy": (
                round(sum(j["nav"]["correct"] for j in judged) / len(judged), 3) if "nav" in judged[0] else None
            ),
        }
    out = {
        "conversation": args.conversation,
        "memory": args.name,
        "db": args.db,
        "model": kt.model.id,
        "budget_tokens": args.budget,
        "messages": len(rows),
        "tree_info": kt.tree(args.name).info.model_dump(),
        "summary": summary,
        "questions": per_q,
        "judged": judged,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    raise SystemExit(main())
