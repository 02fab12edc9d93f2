"""The seams of the one build pipeline: construct/ builds from documents and a client and returns
what it built (no KnowTree, no store); the guards judge a `StoredTree` snapshot; the KB builder
reads and writes through `KBRows`; the loaders share one collect-problems loop."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from knowtree.construct.builder import build_tree
from knowtree.construct.documents import SourcesResult, build_sources, finish_removal, plan_removal
from knowtree.construct.guards import StoredTree, check_stored
from knowtree.construct.kb.builder import KBContext, KBOptions, build
from knowtree.construct.kb.incremental import add_issues
from knowtree.construct.structure import StructureOptions
from knowtree.construct.taxonomy import DEFAULT_TAXONOMY
from knowtree.errors import InputError, NotFoundError, UserError
from knowtree.ingest.kb_inputs import Attribute, AttributeConfig, DocSection, RawIssue
from knowtree.ingest.markdown import markdown_sections
from knowtree.ingest.problems import BadFilesError, Skipped, load_each
from knowtree.ingest.structure import make_document
from knowtree.llm.client import LLMClient
from knowtree.retrieve.kbindex import KBIndexes
from knowtree.store.kb import KBChunk, KBCluster, KBIssue, KBRaw, KBTheme
from knowtree.testing.models import KeywordModel

HANDBOOK = "# Handbook\n\n## Deploying\n\nDeploys happen on Tuesdays after the review.\n\n## Rollback\n\nRedeploy the previous tag.\n"
NOTES = "# Notes\n\n## Kickoff\n\nMaria Okafor leads the project from Frankfurt.\n\n## Budget\n\nThe budget is 40000 euros.\n"


def opts(sources: Sequence[Any]) -> StructureOptions:
    return StructureOptions(
        max_pages=4,
        max_chars=4000,
        max_children=8,
        taxonomy=DEFAULT_TAXONOMY,
        eager_paths=frozenset(sd.path for sd in sources),
    )


def sources() -> list[Any]:
    return [
        markdown_sections(make_document("handbook.md", HANDBOOK)),
        markdown_sections(make_document("notes.md", NOTES)),
    ]


def test_build_sources_returns_what_it_built_and_reuses_it_without_calls() -> None:
    model = KeywordModel()
    first = build_sources(sources(), LLMClient(model), opts(sources()), describe=True, previous={})
    assert isinstance(first, SourcesResult)
    assert [d.path for d in first.documents] == ["handbook.md", "notes.md"]
    assert [i.path for i in first.infos] == ["handbook.md", "notes.md"]
    assert all(i.description for i in first.infos)
    assert first.root_id in {n.id for n in first.nodes}
    assert first.usage.calls > 0
    # a rebuild handed the previous nodes and records reuses them: no model call at all
    again_client = LLMClient(model)
    previous = {n.id: n for n in first.nodes}
    again = build_sources(
        sources(), again_client, opts(sources()), describe=True, previous=previous, old_infos=first.infos
    )
    assert again.root_id == first.root_id
    assert again_client.usage.calls == 0
    assert [i.description for i in again.infos] == [i.description for i in first.infos]


def test_add_keeps_the_stored_documents_and_removal_plans_without_a_store() -> None:
    model = KeywordModel()
    one = build_sources(sources()[:1], LLMClient(model), opts(sources()), describe=False, previous={})
    previous = {n.id: n for n in one.nodes}
    both = build_sources(
        sources()[1:],
        LLMClient(model),
        opts(sources()),
        describe=False,
        previous=previous,
        old_infos=one.infos,
        stored=one.documents,
        add=True,
    )
    assert [d.path for d in both.documents] == ["handbook.md", "notes.md"]
    nodes = {n.id: n for n in both.nodes}
    removal = plan_removal(nodes, both.infos, "t", "notes.md")
    assert [i.path for i in removal.rest] == ["handbook.md"] and not removal.needs_model
    root_id, usage = finish_removal(removal, nodes, None)
    assert root_id == both.infos[0].node_id and usage.calls == 0
    with pytest.raises(NotFoundError):
        plan_removal(nodes, both.infos, "t", "missing.md")


def test_build_tree_returns_the_documents_it_holds() -> None:
    docs = [make_document("a.txt", "Alpha beta gamma. " * 50)]
    result = build_tree(docs, LLMClient(KeywordModel()), taxonomy=DEFAULT_TAXONOMY, chunk_size=300)
    assert result.documents == docs and result.leaves > 1


def test_check_stored_judges_a_snapshot() -> None:
    check_stored(None, "t", kind="document", paths=["a.md"])  # no tree: nothing to protect
    memory = StoredTree("conversation", "a conversation memory with 3 message(s)", [])
    with pytest.raises(UserError, match="a conversation memory with 3 message"):
        check_stored(memory, "t", kind="document", paths=["a.md"])
    check_stored(memory, "t", kind="document", paths=["a.md"], replace=True)
    tree = StoredTree("document", "", ["a.md", "b.md"])
    with pytest.raises(UserError, match=r"holds 1 document\(s\) not in this build \(b\.md\)"):
        check_stored(tree, "t", kind="document", paths=["./a.md"])
    check_stored(tree, "t", kind="document", paths=["a.md"], add=True)
    check_stored(tree, "t", kind="document", paths=["b.md", "a.md"])  # the incremental rebuild
    with pytest.raises(UserError, match=r"importing x\.json would replace it"):
        check_stored(tree, "t", kind="document", action="importing x.json")


def test_load_each_collects_every_problem_and_loads_each_file_once(tmp_path: Path) -> None:
    good = tmp_path / "good.txt"
    good.write_text("ok")

    def expand(entry: str) -> list[str]:
        if entry == "missing":
            raise InputError(entry, "no such file or directory")
        return [str(good), entry] if entry != str(good) else [entry]

    def load(path: str) -> str:
        if path.endswith("bad"):
            raise InputError(path, "binary")
        return Path(path).read_text()

    with pytest.raises(BadFilesError) as err:
        load_each([str(good), "missing", "x.bad"], expand, load, skip_bad=False, skipped=None)
    assert [p.path for p in err.value.problems] == ["missing", "x.bad"]
    skipped: list[Skipped] = []
    assert load_each([str(good), "missing", "x.bad"], expand, load, skip_bad=True, skipped=skipped) == ["ok"]
    assert [s.line() for s in skipped] == ["missing: no such file or directory", "x.bad: binary"]


class MemoryRows:
    """An in-memory `KBRows`: the KB builder runs without a store."""

    def __init__(self) -> None:
        self.raw: dict[str, KBRaw] = {}
        self.themes: dict[str, KBTheme] = {}
        self.clusters: dict[str, KBCluster] = {}
        self.issues: dict[str, KBIssue] = {}
        self.chunks: dict[str, KBChunk] = {}
        self.stale: list[str] = []

    def save_parts(self, **parts: Sequence[Any]) -> None:
        for kind, rows in parts.items():
            getattr(self, kind).update({r.id: r for r in rows})

    def save_solution(self, issue_id: str, solution: Any, status: str, compliance: list[dict[str, Any]]) -> None:
        issue = self.issues[issue_id]
        issue.solution, issue.status, issue.compliance = solution, status, compliance

    def mark_stale(self, issue_ids: Sequence[str]) -> None:
        self.stale.extend(issue_ids)

    def load_raw(self) -> list[KBRaw]:
        return list(self.raw.values())

    def load_themes(self) -> list[KBTheme]:
        return list(self.themes.values())

    def load_issues(self) -> list[KBIssue]:
        return list(self.issues.values())

    def load_chunks(self) -> list[KBChunk]:
        return list(self.chunks.values())

    def load_clusters(self) -> list[KBCluster]:
        return list(self.clusters.values())


def test_kb_builder_reads_and_writes_through_kbrows(tmp_path: Path) -> None:
    rows = MemoryRows()
    config = AttributeConfig(
        domain="headphones", attributes=[Attribute("topic", ["bluetooth", "battery"])]
    )
    ctx = KBContext(
        rows=rows,
        name="hp",
        client=LLMClient(KeywordModel()),
        indexes=KBIndexes(str(tmp_path / "index.db"), "hp", "hash"),
        config=config,
        rules=[],
        options=KBOptions(solutions="eager"),
    )
    raw = [
        RawIssue("h1", "headphones will not pair over bluetooth"),
        RawIssue("h2", "headphones won't pair over bluetooth"),
        RawIssue("b1", "the battery drains very fast"),
    ]
    docs = [DocSection("pair", "Pairing", "Hold the power button to pair over bluetooth.", "manual")]
    report = build(ctx, raw, docs)
    assert report.raw_issues == 3 and report.chunks == 1
    assert set(rows.raw) == {"h1", "h2", "b1"} and rows.issues and rows.chunks
    assert all(i.solution is not None for i in rows.issues.values())
    again = add_issues(ctx, [RawIssue("h1", "headphones will not pair over bluetooth")])
    assert again.skipped == 1 and again.raw_issues == 0
