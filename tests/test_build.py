"""Building trees: grouping, planning, metadata, caching, resuming, fallbacks and incremental rebuilds."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import Any

import pytest

from conftest import CORPUS, paragraphs, write_corpus
from knowtree import KnowTree
from knowtree.construct.builder import balanced_groups, build_tree, group_leaves, merge_spans, plan_tree
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY, normalize_types
from knowtree.errors import ModelCallError
from knowtree.llm.base import Request
from knowtree.llm.client import LLMClient
from knowtree.testing.models import FunctionModel, KeywordModel
from knowtree.types import Document, Node, NodeKind, Span

SIX_FIELDS = ("summary", "content_types", "critical_actions", "decisions", "noteworthy_events", "about")


def doc(path: str, text: str) -> Document:
    return Document(path=path, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


def leaves_below(nodes: dict[str, Node], node_id: str) -> list[Node]:
    node = nodes[node_id]
    if node.is_leaf:
        return [node]
    return [leaf for child in node.children for leaf in leaves_below(nodes, child)]


class Counting(FunctionModel):
    """KeywordModel's answers, with the requests counted by purpose and an optional override."""

    def __init__(self, override: Any = None, *, id: str = "counting") -> None:
        self.keyword = KeywordModel()
        self.override = override
        super().__init__(self._reply, id=id)

    def _reply(self, request: Request) -> Any:
        if self.override is not None:
            value = self.override(request)
            if value is not None:
                return value
        return self.keyword.reply(request)

    def count(self, purpose: str | None = None) -> int:
        return sum(1 for r in self.requests if purpose is None or r.schema_name == purpose)


# -- grouping --------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 15, 16, 17, 64, 65, 100])
@pytest.mark.parametrize("max_children", [2, 5, 8])
def test_balanced_groups(n: int, max_children: int) -> None:
    items = [f"i{k}" for k in range(n)]
    groups = balanced_groups(items, max_children)
    assert [x for g in groups for x in g] == items  # order kept, nothing lost
    assert len(groups) == -(-n // max_children)  # the fewest groups
    sizes = [len(g) for g in groups]
    assert max(sizes) <= max_children and max(sizes) - min(sizes) <= 1
    assert balanced_groups([], max_children) == []


def test_group_leaves_properties() -> None:
    rng = random.Random(1234)
    for _ in range(300):
        max_children = rng.randint(2, 8)
        runs = []
        for d in range(rng.randint(1, 12)):
            runs.append([f"d{d}-{k}" for k in range(rng.randint(1, 20))])
        groups = group_leaves(runs, max_children)
        assert [x for g in groups for x in g] == [x for r in runs for x in r]
        assert all(1 <= len(g) <= max_children for g in groups)
        for run in runs:
            if len(run) <= max_children:  # a short document is never split across branches
                assert sum(1 for g in groups if set(run) & set(g)) == 1
            else:  # a long one gets branches of its own
                assert all(set(g) <= set(run) for g in groups if set(run) & set(g))


def test_group_leaves_packs_short_documents() -> None:
    assert group_leaves([["a"], ["b", "c"], ["d", "e", "f"]], 3) == [["a", "b", "c"], ["d", "e", "f"]]
    assert group_leaves([["a", "b"], ["c", "d"]], 3) == [["a", "b"], ["c", "d"]]


def test_merge_spans() -> None:
    spans = [
        Span(file="a", start=10, end=20, line_start=2, line_end=3),
        Span(file="b", start=0, end=5, line_start=1, line_end=1),
        Span(file="a", start=0, end=9, line_start=1, line_end=1),
    ]
    assert merge_spans(spans) == [
        Span(file="a", start=0, end=20, line_start=1, line_end=3),
        Span(file="b", start=0, end=5, line_start=1, line_end=1),
    ]


# -- planning --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("leaves", "depth"), [(1, 1), (8, 1), (9, 2), (64, 2), (65, 3)])
def test_plan_tree_depth(leaves: int, depth: int) -> None:
    planned, root_id = plan_tree([doc("p.md", paragraphs(leaves))], chunk_size=200, overlap=0, max_children=8)
    by_id = {p.id: p for p in planned}
    assert sum(1 for p in planned if p.kind is NodeKind.LEAF) == leaves
    assert by_id[root_id].level == depth
    assert [p.id for p in planned if p.kind is NodeKind.ROOT] == [root_id]
    for p in planned:
        if p.kind is not NodeKind.LEAF:
            assert 1 <= len(p.children) <= 8
            assert all(by_id[c].level == p.level - 1 for c in p.children)  # levels are uniform
    # every leaf is reached exactly once from the root
    reached: list[str] = []
    stack = [root_id]
    while stack:
        p = by_id[stack.pop()]
        if p.kind is NodeKind.LEAF:
            reached.append(p.id)
        stack.extend(p.children)
    assert sorted(reached) == sorted(p.id for p in planned if p.kind is NodeKind.LEAF)


def test_plan_tree_is_deterministic_and_content_addressed() -> None:
    docs = [doc("a.md", paragraphs(5)), doc("b.md", paragraphs(6, topic="harbour"))]
    first, root1 = plan_tree(docs, chunk_size=200, overlap=0, max_children=4)
    second, root2 = plan_tree(docs, chunk_size=200, overlap=0, max_children=4)
    assert root1 == root2 and [p.id for p in first] == [p.id for p in second]
    changed = [docs[0], doc("b.md", paragraphs(6, topic="harbour").replace("item 5", "item five"))]
    third, root3 = plan_tree(changed, chunk_size=200, overlap=0, max_children=4)
    assert root3 != root1
    assert len(set(p.id for p in first) - set(p.id for p in third)) >= 2  # the leaf and its ancestors


def test_same_text_twice_in_one_file_gets_distinct_leaf_ids() -> None:
    text = paragraphs(1) + "\n" + paragraphs(1)
    planned, _ = plan_tree([doc("dup.md", text)], chunk_size=200, overlap=0, max_children=8)
    leaf_ids = [p.id for p in planned if p.kind is NodeKind.LEAF]
    assert len(leaf_ids) == 2 and len(set(leaf_ids)) == 2


# -- building --------------------------------------------------------------------------------------


def test_build_tree_with_keyword_model() -> None:
    docs = [doc("a.md", paragraphs(10)), doc("b.md", paragraphs(3, topic="harbour"))]
    progress: list[tuple[str, int, int]] = []
    result = build_tree(
        docs,
        LLMClient(KeywordModel()),
        taxonomy=DEFAULT_TAXONOMY,
        chunk_size=200,
        max_children=4,
        progress=lambda *a: progress.append(a),
    )
    nodes = {n.id: n for n in result.nodes}
    assert result.leaves == 13 and result.fallbacks == 0
    assert nodes[result.root_id].kind is NodeKind.ROOT and result.depth == nodes[result.root_id].level
    for node in result.nodes:
        dumped = node.meta.model_dump()
        assert set(SIX_FIELDS) <= set(dumped)
        assert node.meta.summary.strip()
        if node.is_leaf:
            assert len(node.spans) == 1 and node.text
            span = node.spans[0]
            source = next(d for d in docs if d.path == span.file)
            assert source.text[span.start : span.end] == node.text
            assert node.meta.content_types == ["Reference documentation"]
        else:
            assert len(node.children) <= 4 and not node.text
            for leaf in leaves_below(nodes, node.id):
                (outer,) = [s for s in node.spans if s.file == leaf.spans[0].file]
                inner = leaf.spans[0]
                assert outer.start <= inner.start and inner.end <= outer.end
                assert outer.line_start <= inner.line_start and inner.line_end <= outer.line_end
            assert {s.file for s in node.spans} == {
                leaf.spans[0].file for leaf in leaves_below(nodes, node.id)
            }
    # progress: starts at 0 and counts up to the total once
    assert progress[0][1] == 0 and progress[-1][1] == progress[-1][2]
    assert [p[1] for p in progress[1:]] == list(range(1, progress[-1][2] + 1))


def test_branch_metadata_merges_children_lists() -> None:
    docs = [doc("a.md", paragraphs(9))]
    result = build_tree(docs, LLMClient(KeywordModel()), taxonomy=DEFAULT_TAXONOMY, chunk_size=200)
    root = next(n for n in result.nodes if n.kind is NodeKind.ROOT)
    assert root.meta.content_types == ["Reference documentation"]
    assert "Paragraph" in root.meta.about


def test_rebuild_is_answered_from_the_cache(tmp_path: Path, corpus: list[str]) -> None:
    with KnowTree(tmp_path / "kb.db", model=KeywordModel()) as kt:
        first = kt.build(corpus, tree="t")
    assert first.usage.calls == 4 and first.usage.cached == 0  # 3 leaves + the root
    model = KeywordModel()
    with KnowTree(tmp_path / "kb.db", model=model) as kt:
        second = kt.build(corpus, tree="t")
        nodes = kt.tree("t").nodes
    assert second.usage.calls == 0 and second.usage.cached == 4
    assert model.requests == []
    assert second.root_id == first.root_id and len(nodes) == first.nodes
    assert "0 LLM calls" in second.line()


class Boom(Exception):
    pass


def test_failed_build_keeps_the_old_tree_and_resumes_from_the_cache(tmp_path: Path) -> None:
    db = tmp_path / "kb.db"
    files = {f"f{i}.md": paragraphs(2, topic=f"topic{i}") for i in range(3)}
    paths = write_corpus(tmp_path / "docs", files)
    with KnowTree(db, model=KeywordModel(), chunk_size=200, concurrency=1) as kt:
        kt.build(paths, tree="t")
        before = kt.tree("t").nodes

    # change every file, then rebuild with a model that dies on its 3rd leaf call (and stays dead)
    for path in paths:
        Path(path).write_text(Path(path).read_text().replace("calm", "stormy"))
    state = {"leaf_calls": 0, "dead": False}

    def dying(request: Request) -> Any:
        if state["dead"]:
            return Boom("still down")
        if request.schema_name == "leaf_meta":
            state["leaf_calls"] += 1
            if state["leaf_calls"] == 3:
                state["dead"] = True
                return Boom("the model process died")
        return None

    failing = Counting(dying, id="flaky")
    with KnowTree(db, model=failing, chunk_size=200, concurrency=1) as kt:
        with pytest.raises(ModelCallError, match="flaky") as err:  # typed, naming the model
            kt.build(paths, tree="t")
        assert isinstance(err.value.__cause__, Boom)
        assert kt.tree("t").nodes == before  # the stored tree is the old version, intact
        runs = kt.store.runs("t")
        assert runs[0]["kind"] == "build" and runs[0]["status"] == "failed"
    assert failing.count("leaf_meta") >= 3

    working = Counting(id="flaky")  # the same model id: the finished calls are in the cache
    with KnowTree(db, model=working, chunk_size=200, concurrency=1) as kt:
        report = kt.build(paths, tree="t")
        after = kt.tree("t").nodes
    leaves = sum(1 for n in after.values() if n.is_leaf)
    synthesized = sum(1 for n in after.values() if not n.is_leaf and len(n.children) > 1)
    assert leaves == 6
    assert working.count("leaf_meta") == leaves - 2  # the first two leaves are not asked again
    assert working.count() == leaves - 2 + synthesized
    assert report.usage.calls == working.count() and report.usage.cached == 2
    assert all("stormy" in n.text for n in after.values() if n.is_leaf)


def test_interrupted_build_marks_the_run_failed(tmp_path: Path, corpus: list[str]) -> None:
    def interrupt(request: Request) -> Any:
        raise KeyboardInterrupt

    with KnowTree(tmp_path / "kb.db", model=FunctionModel(interrupt)) as kt:
        with pytest.raises(KeyboardInterrupt):
            kt.build(corpus, tree="t")
        assert kt.store.runs()[0]["status"] == "failed"
        assert kt.store.tree_names() == []


def test_invalid_replies_give_fallback_metadata_and_the_build_completes(tmp_path: Path) -> None:
    files = dict(CORPUS)
    files["poison.md"] = "POISON paragraph: the model never manages to describe this one properly.\n"
    paths = write_corpus(tmp_path / "docs", files)

    def garbage(request: Request) -> Any:
        if request.schema_name == "leaf_meta" and "POISON" in request.messages[1].content:
            return "I cannot answer in JSON, sorry."
        return None

    model = Counting(garbage)
    with KnowTree(tmp_path / "kb.db", model=model) as kt:
        report = kt.build(paths, tree="t")
        nodes = kt.tree("t").nodes
    assert report.fallbacks == 1
    (poisoned,) = [n for n in nodes.values() if n.is_leaf and "POISON" in n.text]
    assert poisoned.meta.fallback
    assert poisoned.meta.summary.startswith("POISON paragraph")
    others = [n for n in nodes.values() if n.is_leaf and n is not poisoned]
    assert others and all(n.meta.fallback is None for n in others)
    poison_calls = [
        r for r in model.requests if r.schema_name == "leaf_meta" and "POISON" in r.messages[1].content
    ]
    assert len(poison_calls) >= 2  # the first try and at least one repair (repair_attempts=2)
    assert "not valid" in poison_calls[1].messages[-1].content


def test_rebuild_retries_nodes_that_fell_back(tmp_path: Path, corpus: list[str]) -> None:
    flaky = Counting(lambda r: "not json" if r.schema_name == "leaf_meta" else None, id="flaky")
    with KnowTree(tmp_path / "kb.db", model=flaky) as kt:
        assert kt.build(corpus, tree="t").fallbacks == 3
    recovered = Counting(id="flaky")  # the same model, now answering properly
    with KnowTree(tmp_path / "kb.db", model=recovered) as kt:
        report = kt.build(corpus, tree="t")
    assert report.fallbacks == 0


def test_invalid_branch_reply_gives_fallback_metadata(tmp_path: Path, corpus: list[str]) -> None:
    model = Counting(lambda r: "nonsense" if r.schema_name == "branch_meta" else None)
    with KnowTree(tmp_path / "kb.db", model=model) as kt:
        report = kt.build(corpus, tree="t")
        root = kt.tree("t").root
    assert report.fallbacks == 1 and root.meta.fallback
    assert root.meta.summary  # derived from the children's summaries


def test_building_from_no_documents_is_an_input_error(tmp_path: Path) -> None:
    import knowtree

    model = KeywordModel()
    with KnowTree(tmp_path / "kb.db", model=model) as kt:
        with pytest.raises(knowtree.InputError):
            kt.build([], tree="empty")
        assert kt.store.tree_names() == [] and model.requests == []


def test_taxonomy_normalization() -> None:
    types, unlisted = normalize_types(
        ["meeting NOTES & minutes", "Meeting notes", "  FAQs ", "Widgets catalogue", ""], DEFAULT_TAXONOMY
    )
    assert types == ["Meeting notes & minutes", "FAQs", "Widgets catalogue"]
    assert unlisted == ["Widgets catalogue"]
    assert normalize_types(["Minutes"], DEFAULT_TAXONOMY) == (["Meeting notes & minutes"], [])
    assert normalize_types(["api-documentation"], DEFAULT_TAXONOMY) == (["API documentation"], [])
    assert normalize_types(["Recipe"], ["Recipe", "Other"]) == (["Recipe"], [])


def test_taxonomy_is_applied_during_the_build(tmp_path: Path, corpus: list[str]) -> None:
    def typed(request: Request) -> Any:
        if request.schema_name != "leaf_meta":
            return None
        reply = KeywordModel().reply(request)
        reply["content_types"] = ["meeting notes", "Space opera"]
        return reply

    with KnowTree(tmp_path / "kb.db", model=Counting(typed)) as kt:
        kt.build(corpus, tree="t")
        tree = kt.tree("t")
        nodes, root = tree.nodes, tree.root
    leaf = next(n for n in nodes.values() if n.is_leaf)
    assert leaf.meta.content_types == ["Meeting notes & minutes", "Space opera"]
    assert leaf.meta.unlisted_types == ["Space opera"]
    assert root.meta.content_types == ["Meeting notes & minutes", "Space opera"]
    assert root.meta.unlisted_types == ["Space opera"]  # flagged up the tree


def test_taxonomy_from_settings_reaches_the_prompt(tmp_path: Path, corpus: list[str]) -> None:
    model = Counting()
    with KnowTree(tmp_path / "kb.db", model=model, taxonomy=["Recipes", "Poems"]) as kt:
        kt.build(corpus, tree="t")
    prompt = next(r for r in model.requests if r.schema_name == "leaf_meta").messages[-1].content
    assert "Recipes; Poems" in prompt and "Meeting notes & minutes" not in prompt


@pytest.mark.parametrize(("edited", "expected"), [(0, 3), (2, 2)])
def test_editing_one_file_only_pays_for_its_leaf_and_ancestors(
    tmp_path: Path, corpus: list[str], edited: int, expected: int
) -> None:
    # max_children=2 over three one-leaf files: root -> [branch(budget, launch), branch(database)]
    with KnowTree(tmp_path / "kb.db", model=KeywordModel(), max_children=2) as kt:
        kt.build(corpus, tree="t")
        shape = kt.tree("t").root.children
    assert len(shape) == 2
    path = Path(corpus[edited])
    path.write_text(path.read_text() + "A late addendum was written in November.\n")
    model = Counting(id="keyword")
    with KnowTree(tmp_path / "kb.db", model=model, max_children=2) as kt:
        report = kt.build(corpus, tree="t")
    # budget.md: its leaf, its two-leaf branch and the root; database.md: its leaf and the root (its
    # branch has one child, whose metadata it copies without a call)
    assert model.count("leaf_meta") == 1
    assert model.count() == expected
    assert report.usage.calls == expected and report.usage.cached == 3 - 1 + (3 - expected)
    edited_leaf = next(r for r in model.requests if r.schema_name == "leaf_meta")
    assert "November" in edited_leaf.messages[-1].content


def test_summaries_none_makes_no_model_call_on_a_structured_build_unless_describe_is_asked(
    tmp_path: Path, cli: Any
) -> None:
    from conftest import invoke

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"d{i}.md").write_text(f"# Doc {i}\n\n## Part\n\nAlice filed ticket code{i}.\n", encoding="utf-8")
    db = str(tmp_path / "kb.db")
    common = ["--db", db, "--model", "keyword", "--summaries", "none", "--structure", "headings"]
    out = invoke(cli, "build", str(docs), "--tree", "a", *common)
    assert "0 LLM calls" in out, out  # "none": no model call, as its help says (it described each document)
    out = invoke(cli, "build", str(docs), "--tree", "b", *common, "--describe")
    assert "3 LLM calls" in out, out  # asked for: one call per document
