"""Methods that need the model: knowtree's walk, its ablations, full context and RAPTOR.

All use the run's one model (`Runtime`), so accuracy differences come from the method, not the model.

- `walk`      knowtree: a tree with typed metadata, navigation with backtracking, verified quotes.
- `search`    knowtree's tree search: one call over the outline, the chosen sections read, one answer.
- `flat`      ablation: the same leaves hung directly under the root (no branches), same walk.
- `memwalker` ablation, MemWalker as published: the same tree, options shown by summary only, the
              leaf reply trusted (no quote check, no partial flag), the question never split.
- `fulltext`  the whole corpus in one prompt, cut to the model's context window; the record says
              how much was cut (`metrics.cut`, the share of corpus tokens not shown).
- `raptor`    a RAPTOR-style collapsed tree (`raptor.py`), read in similarity order up to the budget.

Tree methods build one knowtree tree per corpus in `prepare` (cached calls, so a rerun is free); the
leaves a walk read are mapped back to the dataset's passages, so evidence hit rates compare.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from knowtree.types import Answer, Document, Node, NodeKind, NodeMeta, content_hash
from knowtree_eval import metrics as m
from knowtree_eval.base import CorpusContext, MethodFactory, MethodParams, Record
from knowtree_eval.datasets import Case, Corpus
from knowtree_eval.scoring import account, base_record, read_metrics, read_text, score_answer

SEP = "\n\n"


def corpus_documents(corpus: Corpus) -> list[Document]:
    """The corpus as knowtree documents (one per dataset document, passages joined in order)."""
    import hashlib

    docs = []
    for doc in corpus.documents:
        text = corpus.document_text(doc, SEP)
        docs.append(Document(path=doc, text=text, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest()))
    return docs


def passage_ranges(corpus: Corpus) -> dict[str, list[tuple[str, int, int]]]:
    """Per document, each passage's (id, start, end) offsets in the joined document text."""
    out: dict[str, list[tuple[str, int, int]]] = {}
    for doc, pids in corpus.documents.items():
        pos = 0
        ranges = []
        for pid in pids:
            n = len(corpus.passages[pid].text)
            ranges.append((pid, pos, pos + n))
            pos += n + len(SEP)
        out[doc] = ranges
    return out


def tree_name(corpus: Corpus) -> str:
    return f"eval-{corpus.id[:40]}-{corpus.fingerprint()[:12]}"


# -- tree walks ----------------------------------------------------------------------------------------


@dataclass
class WalkMethod:
    """knowtree's walk over a tree built from the corpus (`flat` and `memwalker` are its ablations)."""

    name: str = "walk"
    flat: bool = False
    metadata: bool = True
    verify: bool = True
    max_branch_attempts: int | None = None
    leaves_per_branch: int | None = None
    _ranges: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict, repr=False)

    def prepare(self, ctx: CorpusContext) -> None:
        kt = ctx.need_runtime().kt()
        name = tree_name(ctx.corpus)
        report = kt.build_documents(corpus_documents(ctx.corpus), tree=name)
        ctx.charge_setup(self.name, report.usage)
        self._ranges = passage_ranges(ctx.corpus)

    def _nodes(self, ctx: CorpusContext) -> tuple[dict[str, Node], str]:
        tree = ctx.need_runtime().kt().tree(tree_name(ctx.corpus))
        nodes = dict(tree.nodes)
        if not self.flat:
            return nodes, tree.root.id
        # the same leaves, in reading order, directly under one root: navigation without hierarchy
        leaves = _leaves_in_order(nodes, tree.root.id)
        root_id = content_hash("flat-root", *leaves)
        nodes[root_id] = Node(
            id=root_id,
            kind=NodeKind.ROOT,
            level=1,
            children=leaves,
            meta=NodeMeta(summary=tree.root.meta.summary),
        )
        return nodes, root_id

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        from knowtree.answer.walk import Walker, WalkOptions

        started = time.perf_counter()
        runtime = ctx.need_runtime()
        s = runtime.kt().settings
        nodes, root_id = self._nodes(ctx)
        options = WalkOptions(
            max_branch_attempts=self.max_branch_attempts or s.max_branch_attempts,
            leaves_per_branch=self.leaves_per_branch or s.leaves_per_branch,
            leaf_chars=max(6000, max((len(n.text) for n in nodes.values() if n.is_leaf), default=0)),
            metadata=self.metadata,
            verify=self.verify,
        )
        record = base_record(case, self.name)
        with runtime.question("eval", f"{self.name}:{case.corpus}", case.question) as (client, run_id):
            answer = Walker(nodes, root_id, client, options).ask(case.prompt())
            account(record, client, run_id)
        read = [step.node_id for step in answer.trace if step.action == "read" and step.node_id]
        return self._record(record, case, ctx, answer, nodes, read, started)

    def _record(
        self,
        record: Record,
        case: Case,
        ctx: CorpusContext,
        answer: Answer,
        nodes: dict[str, Node],
        read: list[str],
        started: float,
    ) -> Record:
        """Fill a record from a tree answer and the leaves it read (mapped to the dataset's passages)."""
        record.prediction = answer.answer
        record.status = answer.status
        record.retrieved = self._passages(nodes, read)
        record.tokens_read = sum(ctx.tokens(nodes[i].text) for i in dict.fromkeys(read))
        record.metrics = read_metrics(case, ctx, record.retrieved)
        score_answer(record, case)
        record.wall_s = time.perf_counter() - started
        return record

    def _passages(self, nodes: dict[str, Node], leaf_ids: list[str]) -> list[str]:
        """Dataset passages overlapping the leaves read, in reading order."""
        out: dict[str, None] = {}
        for leaf_id in leaf_ids:
            for span in nodes[leaf_id].spans:
                for pid, start, end in self._ranges.get(span.file, []):
                    if start < span.end and span.start < end:
                        out.setdefault(pid, None)
        return list(out)


@dataclass
class SearchMethod(WalkMethod):
    """knowtree's tree search: one call over the outline picks sections, their leaves are read within
    `budget_tokens`, one answer call (quote-verified) — on the same tree as `walk`."""

    name: str = "search"
    budget_tokens: int | None = None

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        from knowtree.answer.search import SearchOptions, TreeSearch

        started = time.perf_counter()
        runtime = ctx.need_runtime()
        nodes, root_id = self._nodes(ctx)
        options = SearchOptions()
        if self.budget_tokens:
            options.budget_tokens = self.budget_tokens
        record = base_record(case, self.name)
        with runtime.question("eval", f"{self.name}:{case.corpus}", case.question) as (client, run_id):
            answer = TreeSearch(nodes, client, options).ask(case.prompt(), [root_id])
            account(record, client, run_id)
        read = [leaf for step in answer.trace if step.action == "read" for leaf in step.options]
        return self._record(record, case, ctx, answer, nodes, read, started)


def _leaves_in_order(nodes: dict[str, Node], root_id: str) -> list[str]:
    out: list[str] = []
    stack = [root_id]
    while stack:
        node = nodes[stack.pop()]
        if node.is_leaf:
            out.append(node.id)
        else:
            stack.extend(reversed(node.children))
    return out


# -- full context ----------------------------------------------------------------------------------


@dataclass
class FullTextMethod:
    """The whole corpus in one prompt, cut at the model's context window (and the cut reported).

    The window is the model's `n_ctx` less room for the instructions and the reply; characters are
    converted at `chars_per_token` (3.2: conservative for English with Qwen/Llama tokenizers, so the
    prompt fits). Passages are kept whole and in order until the next would not fit.
    """

    name: str = "fulltext"
    reserve_tokens: int = 700
    chars_per_token: float = 3.2

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        started = time.perf_counter()
        runtime = ctx.need_runtime()
        window = runtime.kt().settings.n_ctx - self.reserve_tokens - len(case.prompt()) // 3
        limit = int(window * self.chars_per_token)
        order = [pid for pids in ctx.corpus.documents.values() for pid in pids]
        kept: list[str] = []
        used = 0
        for pid in order:  # whole passages in reading order, up to the first that does not fit
            size = len(ctx.corpus.text(pid)) + len(SEP)
            if used + size > limit:
                break
            kept.append(pid)
            used += size
        total = sum(ctx.tokens(ctx.corpus.text(p)) for p in order)
        text = SEP.join(ctx.corpus.text(p) for p in kept)
        record = base_record(case, self.name)
        read_text(record, case, ctx, text)
        record.retrieved = kept
        record.tokens_read = sum(ctx.tokens(ctx.corpus.text(p)) for p in kept)
        record.metrics = read_metrics(case, ctx, kept)
        record.metrics["cut"] = round(1 - record.tokens_read / total, 4) if total else 0.0
        score_answer(record, case)
        record.wall_s = time.perf_counter() - started
        return record


@dataclass
class ClosedBookMethod:
    """The question answered from no text at all (the reader's prompt with an empty text): how much
    of an answering method's accuracy its reader gets from the question and options alone, the floor
    every method that reads is measured against."""

    name: str = "closed-book"

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        started = time.perf_counter()
        record = base_record(case, self.name)
        read_text(record, case, ctx, "")
        record.tokens_read = 0
        record.metrics = read_metrics(case, ctx, [])
        score_answer(record, case)
        record.wall_s = time.perf_counter() - started
        return record


# -- RAPTOR ------------------------------------------------------------------------------------------


@dataclass
class RaptorMethod:
    name: str = "raptor"
    budget: int = 2048
    cluster_size: int = 6
    seed: int = 0
    _trees: dict[str, Any] = field(default_factory=dict, repr=False)

    def prepare(self, ctx: CorpusContext) -> None:
        from knowtree.retrieve.embed import get_embedder
        from knowtree_eval.raptor import build_collapsed_tree

        runtime = ctx.need_runtime()
        embedder = get_embedder(ctx.embedder)
        passages = [(pid, ctx.corpus.text(pid)) for pids in ctx.corpus.documents.values() for pid in pids]
        with runtime.question("eval-build", f"{self.name}:{ctx.corpus.id}", "raptor tree") as (client, _):
            nodes = build_collapsed_tree(
                passages, client, embedder, cluster_size=self.cluster_size, seed=self.seed
            )
            ctx.charge_setup(self.name, client.usage)
        vectors = embedder.embed([n.text for n in nodes])
        self._trees[ctx.corpus.id] = (nodes, vectors, embedder)

    def run(self, case: Case, ctx: CorpusContext) -> Record:
        from knowtree_eval.raptor import collapsed_search

        started = time.perf_counter()
        if ctx.corpus.id not in self._trees:
            self.prepare(ctx)
        nodes, vectors, embedder = self._trees[ctx.corpus.id]
        order = collapsed_search(nodes, vectors, case.question, embedder)
        lengths = [ctx.tokens(nodes[i].text) for i in order]
        chosen = order[: m.within_budget(lengths, self.budget)]
        text = SEP.join(nodes[i].text for i in chosen)
        record = base_record(case, self.name)
        read_text(record, case, ctx, text)
        # evidence is passages: count those read directly (a summary is not the evidence itself)
        record.retrieved = [nodes[i].id for i in chosen if nodes[i].level == 0]
        record.tokens_read = sum(lengths[: len(chosen)])
        record.metrics = read_metrics(case, ctx, record.retrieved)
        record.metrics["summaries_read"] = float(sum(1 for i in chosen if nodes[i].level > 0))
        score_answer(record, case)
        record.wall_s = time.perf_counter() - started
        return record


# the LLM methods by name: the registry (`methods.py`) adds them when it is first used
FACTORIES: dict[str, MethodFactory] = {
    "walk": lambda p: WalkMethod(name="walk"),
    "flat": lambda p: WalkMethod(name="flat", flat=True),
    "memwalker": lambda p: WalkMethod(name="memwalker", metadata=False, verify=False),
    "search": lambda p: SearchMethod(name="search"),
    "fulltext": lambda p: FullTextMethod(),
    "closed-book": lambda p: ClosedBookMethod(),
    "raptor": lambda p: RaptorMethod(budget=p.budget, seed=p.seed),
}


__all__ = [
    "FACTORIES",
    "ClosedBookMethod",
    "FullTextMethod",
    "MethodParams",
    "RaptorMethod",
    "SearchMethod",
    "WalkMethod",
    "corpus_documents",
]
