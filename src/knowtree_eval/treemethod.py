"""Eval method `tree`: LLM-free retrieval with the tree as an index, over a zero-call tree per corpus.

The tree is built from the dataset's own structure, with no model call (what `--summaries none`
gives a user), and saved in a store, so the index is the one `Tree.retrieve` uses:

| corpus passages                 | tree                                                            |
|---------------------------------|-----------------------------------------------------------------|
| turns (LoCoMo: speaker, date)   | conversation → sessions (date, speakers) → runs of 8 turns → turns |
| pages (FinanceBench)            | filing (company, year, type) → runs of 8 pages → pages           |
| anything else (HotpotQA, QuALITY) | corpus → documents (title) → runs of 8 passages → passages     |

Each leaf is indexed in pieces with its context (`retrieve.context`); the method ranks pieces, and
the budget metrics count the tokens of the pieces shown, so `hit_by_budget` compares with the flat
methods at the same number of tokens read. A piece counts as the passage (turn, page, paragraph)
it was cut from. FinanceBench stays scoped to the question's own filing, as for the flat methods.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from knowtree.retrieve.treescore import ScoreParams
from knowtree.types import Node, NodeKind, NodeMeta, Span, content_hash
from knowtree_eval.base import CorpusContext, Record
from knowtree_eval.datasets import Case, Corpus
from knowtree_eval.scoring import account, base_record, read_into, retrieval_metrics, score_answer

if TYPE_CHECKING:
    from knowtree.retrieve.embed import Embedder
    from knowtree.retrieve.treeindex import TreeIndex
    from knowtree.retrieve.treescore import TreeShape
    from knowtree.retrieve.treesearch import Evidence, Found, Rerank
    from knowtree.store import SQLStore

GROUP = 8  # children per inner node when the dataset gives no structure (knowtree's max_children)


def _node(nid: str, kind: NodeKind, level: int, meta: NodeMeta, children: list[str], **kw: Any) -> Node:
    return Node(id=nid, kind=kind, level=level, meta=meta, children=children, **kw)


@dataclass
class CorpusTree:
    """A zero-call tree over a corpus, and which passage each leaf node stands for."""

    nodes: list[Node]
    root_id: str
    passage_of: dict[str, str]  # leaf node id → passage id
    kind: str  # "conversation" or "document"


def _group(
    parent_title: str, ids: list[str], make_leaf: Any, cid: str, level: int = 1
) -> tuple[list[Node], list[str]]:
    """Leaves for `ids`, in runs of GROUP under positional branches (no model: titles say where)."""
    nodes: list[Node] = []
    tops: list[str] = []
    for start in range(0, len(ids), GROUP):
        run = ids[start : start + GROUP]
        leaves = [make_leaf(p) for p in run]
        nodes.extend(leaves)
        if len(ids) <= GROUP:
            tops = [n.id for n in leaves]
            break
        branch = _node(  # a run of neighbours: structure only, no title to add to the context
            content_hash("grp", cid, parent_title, str(start)),
            NodeKind.BRANCH,
            level,
            NodeMeta(),
            [n.id for n in leaves],
            spans=[s for n in leaves for s in n.spans[:1]],
        )
        nodes.append(branch)
        tops.append(branch.id)
    return nodes, tops


def corpus_tree(corpus: Corpus) -> CorpusTree:
    """The zero-call tree of a corpus, from the structure its passages carry."""
    first = next(iter(corpus.passages.values()))
    cid = corpus.id
    nodes: list[Node] = []
    passage_of: dict[str, str] = {}
    docs: list[str] = []
    line = 0

    def leaf(pid: str, title: str, time_range: list[str] | None = None, page: int | None = None) -> Node:
        nonlocal line
        p = corpus.passages[pid]
        line += 1
        nid = content_hash("leaf", cid, pid, p.text)
        passage_of[nid] = pid
        span = Span(
            file=p.doc,
            start=0,
            end=len(p.text),
            line_start=line,
            line_end=line + p.text.count("\n"),
            page_start=page,
            page_end=page,
        )
        return _node(
            nid,
            NodeKind.LEAF,
            0,
            NodeMeta(title=title, time_range=time_range or []),
            [],
            text=p.text,
            spans=[span],
        )

    if "speaker" in first.meta:  # a conversation: sessions of turns
        kind = "conversation"
        speakers = sorted({str(p.meta.get("speaker")) for p in corpus.passages.values()})
        for doc, pids in corpus.documents.items():
            meta0 = corpus.passages[pids[0]].meta
            date = str(meta0.get("date") or "")
            title = f"Session {meta0.get('session', doc)}" + (f", {date}" if date else "")

            def turn(pid: str, date: str = date) -> Node:
                p = corpus.passages[pid]
                return leaf(pid, str(p.meta.get("speaker") or ""))  # the turn's text holds its date

            sub, tops = _group(title, pids, turn, cid, level=1)
            nodes.extend(sub)
            session = _node(
                content_hash("session", cid, doc),
                NodeKind.BRANCH,
                2,
                NodeMeta(title=title, time_range=[date] if date else [], about=speakers),
                tops,
            )
            nodes.append(session)
            docs.append(session.id)
        root_title = f"Conversation {cid}"
    elif "page" in first.meta:  # a paged filing: runs of pages
        kind = "document"
        for doc, pids in corpus.documents.items():
            name = " ".join(doc.replace("_", " ").split())
            pages = [int(corpus.passages[p].meta["page"]) for p in pids]

            def page(pid: str, name: str = name) -> Node:
                n = int(corpus.passages[pid].meta["page"]) + 1
                return leaf(pid, f"{name}, page {n}", page=n)

            sub, tops = _group(f"{name} pages", pids, page, cid, level=1)
            nodes.extend(sub)
            if len(corpus.documents) == 1:
                docs = tops
                root_title = name
            else:
                d = _node(content_hash("doc", cid, doc), NodeKind.BRANCH, 2, NodeMeta(title=name), tops)
                nodes.append(d)
                docs.append(d.id)
                root_title = cid
            del pages
    else:  # documents of passages (HotpotQA paragraphs, QuALITY chunks)
        kind = "document"
        for doc, pids in corpus.documents.items():
            if len(pids) == 1:
                n = leaf(pids[0], doc)
                nodes.append(n)
                docs.append(n.id)
                continue
            sub, tops = _group(doc, pids, lambda pid, doc=doc: leaf(pid, doc), cid, level=1)
            nodes.extend(sub)
            d = _node(content_hash("doc", cid, doc), NodeKind.BRANCH, 2, NodeMeta(title=doc), tops)
            nodes.append(d)
            docs.append(d.id)
        root_title = cid
    root = _node(content_hash("root", cid), NodeKind.ROOT, 3, NodeMeta(title=root_title), docs)
    nodes.append(root)
    return CorpusTree(nodes, root.id, passage_of, kind)


@dataclass
class Built:
    """One corpus's tree as an index: the in-memory store holding it, and what the metrics need."""

    store: SQLStore
    index: TreeIndex
    shape: TreeShape
    piece_passage: dict[str, str]
    piece_tokens: dict[str, int]
    kind: str
    overview: str = ""  # the inner nodes' summaries, top down in document order (`TreeMethod.overview`)
    overview_tokens: int = 0


@dataclass
class TreeMethod:
    """LLM-free `tree` retrieval: contextual pieces, BM25 + dense, scores rolled up the tree."""

    k: int = 5
    budget: int = 2048
    params: ScoreParams | None = None  # None: the measured defaults for the tree's kind
    use_dense: bool = True
    name: str = "tree"
    #: the run's model writes the inner nodes' metadata before indexing (`construct.enrich`: one summary
    #: per run of leaves, synthesized above), so `tree` is measured on a summarized tree too
    summarize: bool = False
    answer: bool = False  # one answer call over the packed evidence (`knowtree ask --mode retrieve`)
    #: the reader also sees the summarized tree's inner-node summaries (top down, in document order)
    #: before the evidence, as context it cannot quote; their tokens come out of the budget
    overview: bool = False
    #: a multiple-choice question is searched once more per option (the question with that option),
    #: the rankings taken by turns (`search_index`'s default, `retrieve.choices`); False: the question
    #: alone (`nav-one-query`, what `nav` measured before)
    choices: bool = True
    _built: dict[str, Built] = field(default_factory=dict, repr=False)
    _embedder: Embedder | None = field(default=None, repr=False)

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder if self.use_dense else None

    def prepare(self, ctx: CorpusContext) -> None:
        self.built(ctx)

    def built(self, ctx: CorpusContext) -> Built:
        """The corpus's zero-call tree, its index and the piece → passage map (built once)."""
        if ctx.corpus.id in self._built:
            return self._built[ctx.corpus.id]
        from knowtree.retrieve.treeindex import TreeIndex
        from knowtree.retrieve.treesearch import DENSE_SECONDS, shape_of
        from knowtree.store import open_store
        from knowtree.store.dialect import is_url

        tree = corpus_tree(ctx.corpus)
        if self.summarize:
            tree = self._summarized(tree, ctx)
        # the working store: in memory, or the PostgreSQL database of `--db URL` (a file --db keeps
        # only the flat methods' indexes)
        store = open_store(ctx.db if is_url(ctx.db) else ":memory:")
        name = re.sub(r"\W", "_", ctx.corpus.id)[:60] or "corpus"
        store.save_tree(
            name,
            root_id=tree.root_id,
            nodes=tree.nodes,
            documents=[],
            model="none",
            settings={},
            kind=tree.kind,
        )
        index = TreeIndex(store, name)
        if self.use_dense:
            from knowtree.retrieve.embed import get_embedder

            self._embedder = self._embedder or get_embedder(ctx.embedder)
            index.vectors(self._embedder, max_seconds=DENSE_SECONDS)  # else candidates per question
        rows = [r for r in index.rows if r.leaf]
        built = Built(
            store=store,
            index=index,
            shape=shape_of(index),
            piece_passage={r.id: tree.passage_of[r.node] for r in rows},
            piece_tokens={r.id: ctx.tokens(r.text) for r in rows},
            kind=tree.kind,
        )
        if self.overview:
            built.overview = overview_text(tree)
            built.overview_tokens = ctx.tokens(built.overview) if built.overview else 0
        for old in self._built.values():  # one corpus at a time: the runner goes corpus by corpus
            old.store.close()
        self._built = {ctx.corpus.id: built}
        return built

    def _summarized(self, tree: CorpusTree, ctx: CorpusContext) -> CorpusTree:
        """`tree` with model-written metadata on its inner nodes (charged to the method's setup)."""
        from knowtree.construct.enrich import enrich_tree
        from knowtree.construct.taxonomy import DEFAULT_TAXONOMY

        runtime = ctx.need_runtime()
        with runtime.question("eval-build", f"{self.name}:{ctx.corpus.id}", "summaries") as (client, _):
            done = enrich_tree(tree.nodes, tree.root_id, client, DEFAULT_TAXONOMY)
            ctx.charge_setup(self.name, done.usage)
        nodes = [n.model_copy(update={"meta": done.metas[n.id]}) if n.id in done.metas else n for n in tree.nodes]
        return CorpusTree(nodes, tree.root_id, tree.passage_of, tree.kind)

    def answer_from(
        self,
        evidence: list[Evidence],
        case: Case,
        client: Any,
        record: Record,
        reads: int = 1,
        built: Built | None = None,
    ) -> None:
        """The packed evidence answered (`runtime.read_answer`: one call, or `reads` readings of a
        multiple-choice question), into `record`: its prediction, the letters' probabilities and the
        tokens read."""
        text = "\n\n".join(f"[{i}] {ev.text.strip()}" for i, ev in enumerate(evidence, 1))
        if built is not None and built.overview:
            text = f"Overview (summaries of the whole text):\n{built.overview}\n\nPassages:\n{text}"
        read_into(record, client, case, text, reads)
        record.tokens_read = sum(ev.tokens for ev in evidence) + (built.overview_tokens if built else 0)

    def evidence_budget(self, built: Built) -> int:
        """The tokens left for evidence: the budget less the overview's."""
        return max(1, self.budget - built.overview_tokens)

    def search(self, built: Built, question: str, rerank: Rerank | None = None) -> Found:
        """The product's retrieval sequence (`search_index`: rank, optional re-ranking, pack the
        budget) over a corpus's tree, with this method's embedder and score parameters."""
        from knowtree.retrieve.treesearch import search_index

        return search_index(
            built.index,
            question,
            self.evidence_budget(built),
            kind=built.kind,
            embedder=self.embedder,
            params=self.params,
            rerank=rerank,
            shape=built.shape,
            choices=self.choices,
        )

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        started = time.perf_counter()
        built = self.built(ctx)
        # the question as the reader sees it: a multiple-choice question's options are search terms too
        found = self.search(built, case.prompt())
        ranking = found.ranking
        ranked = [built.piece_passage[p] for p in ranking.pieces]
        lengths = [built.piece_tokens[p] for p in ranking.pieces]
        record = base_record(case, self.name)
        record.retrieved = list(dict.fromkeys(ranked[: self.k]))
        record.metrics = retrieval_metrics(case, ctx, ranked, k=self.k, budget=self.budget, lengths=lengths)
        record.tokens_read = sum(lengths[: self.k])
        if self.answer:
            with ctx.need_runtime().question("eval", f"{self.name}:{case.corpus}", case.question) as (
                client,
                run_id,
            ):
                self.answer_from(found.evidence, case, client, record, ctx.need_runtime().choice_reads, built)
                account(record, client, run_id)
            score_answer(record, case)
        record.wall_s = time.perf_counter() - started
        return record


def overview_text(tree: CorpusTree) -> str:
    """The inner nodes' summaries, the root's first, each node's before its children's (document order)."""
    nodes = {n.id: n for n in tree.nodes}
    lines: list[str] = []

    def visit(nid: str) -> None:
        node = nodes[nid]
        if node.is_leaf:
            return
        if node.meta.summary:
            lines.append(f"- {node.meta.summary.strip()}")
        for child in node.children:
            visit(child)

    visit(tree.root_id)
    return "\n".join(lines)
