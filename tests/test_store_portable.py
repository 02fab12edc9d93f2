"""The store modules that own tables of their own (document infos and expert notes, knowledge bases,
tenants and keys, runs) on both backends: SQL written once (ON CONFLICT, RETURNING, stored order,
timestamps from Python), none of SQLite's own dialect left in them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from knowtree.errors import NotFoundError
from knowtree.records import DocInfo, KBChunk, KBCluster, KBIssue, KBRaw, KBRecord, KBTheme
from knowtree.server.tenancy import KeyStore
from knowtree.store import kb as kbrows
from knowtree.store import open_store
from knowtree.store.docinfo import (
    add_expert,
    delete_doc_infos,
    doc_infos,
    list_experts,
    remove_expert,
    save_doc_infos,
)
from knowtree.store.runs import mark_interrupted

SRC = Path(__file__).resolve().parents[1] / "src" / "knowtree"
PORTABLE = ("store/docinfo.py", "store/kb.py", "store/tenants.py", "store/runs.py", "server/tenancy.py")
SQLITE_ONLY = re.compile(
    r"INSERT\s+OR\s+(REPLACE|IGNORE)|\blastrowid\b|julianday\(|datetime\('now'|\bGLOB\b|ORDER BY rowid|\browid\b"
)


def test_the_portable_modules_hold_none_of_sqlites_own_sql() -> None:
    found = [
        f"{name}: {m.group(0)}"
        for name in PORTABLE
        for m in SQLITE_ONLY.finditer((SRC / name).read_text(encoding="utf-8"))
    ]
    assert found == []


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    target = str(tmp_path / "kb.db") if request.param == "sqlite" else request.getfixturevalue("pg_url")
    s = open_store(target)
    yield s
    s.close()


def test_doc_infos_keep_their_stored_order(store: Any) -> None:
    infos = [DocInfo(p, f"n{p}", f"about {p}", {"year": "2024"}, 3, "toc") for p in ("z.md", "a.md", "m.md")]
    save_doc_infos(store, "t", infos)
    assert doc_infos(store, "t") == infos
    save_doc_infos(store, "t", infos[1:])  # a rebuild replaces the tree's infos
    assert [i.path for i in doc_infos(store, "t")] == ["a.md", "m.md"]
    delete_doc_infos(store, "t")
    assert doc_infos(store, "t") == []


def test_expert_notes_get_their_id_from_the_insert(store: Any) -> None:
    first = add_expert(store, "t", "look at the   appendix")
    second = add_expert(store, "*", "prefer tables")
    assert first.id > 0 and second.id > first.id and first.text == "look at the appendix"
    assert list_experts(store, "t") == [first, second]
    remove_expert(store, first.id)
    assert list_experts(store) == [second]
    with pytest.raises(NotFoundError):
        remove_expert(store, first.id)


def test_knowledge_base_rows_are_upserted_in_place(store: Any) -> None:
    kbrows.create_kb(store, KBRecord("kb1", "tv", {"brand": ["x"]}, [], {}, "keyword"))
    raw = [KBRaw("r2", "no picture"), KBRaw("r1", "no sound", "2024-01-01")]
    issue = KBIssue("i1", "parent", None, "c1", "No picture", {"brand": "x"})
    kbrows.save_parts(
        store,
        "kb1",
        raw=raw,
        themes=[KBTheme("t1", "display")],
        clusters=[KBCluster("c1", "t1", "r2", b"\x00\x00\x80?", 1)],
        issues=[issue],
        chunks=[KBChunk("h1", "d1", "manual.md", ["Setup"], "Press the power button.", "Setup")],
    )
    # a second save updates rows by key and keeps their place in the stored order
    kbrows.save_parts(store, "kb1", raw=[KBRaw("r2", "no picture", cluster_id="c1", issue_id="i1")])
    assert [(r.id, r.issue_id) for r in kbrows.load_raw(store, "kb1")] == [("r2", "i1"), ("r1", None)]
    assert kbrows.load_clusters(store, "kb1")[0].centroid == b"\x00\x00\x80?"
    kbrows.save_solution(store, "kb1", "i1", {"steps": ["reset"]}, "ok", [])
    assert kbrows.set_rules(store, "kb1", [{"rule": "be safe"}]) == 1  # the solved issue marked stale
    assert kbrows.load_issues(store, "kb1")[0].status == "stale"
    assert [c.id for c in kbrows.load_chunks(store, "kb1", ["h1", "nope"])] == ["h1"]
    kbrows.delete_kb(store, "kb1")
    assert kbrows.kb_names(store) == []


def test_keys_and_tenants(store: Any) -> None:
    keys = KeyStore(store)
    key, info = keys.create("acme", label="ci")
    _, other = keys.create("acme", read_only=True)  # the tenant exists already: created once
    assert store.query("SELECT COUNT(*) FROM tenants")[0][0] == 1
    assert keys.verify(key).tenant == "acme" and keys.verify("kt_wrong") is None
    assert [k.id for k in keys.list("acme")] == [
        k.id for k in sorted([info, other], key=lambda k: (k.created, k.id))
    ]
    assert keys.active_count() == 2
    revoked = keys.revoke(info.id)
    assert revoked.revoked_at and keys.revoke(info.id).revoked_at == revoked.revoked_at
    assert keys.verify(key) is None and keys.active_count() == 1


def test_runs_of_a_gone_process_are_marked_interrupted(store: Any) -> None:
    run = store.start_run("build", "t")
    store.write(lambda c: c.execute("UPDATE runs SET pid = ? WHERE id = ?", (2**22 + 12345, run)))
    assert store.write(lambda c: mark_interrupted(c, "2026-01-01T00:00:00+00:00")) == 1
    assert store.runs("t")[0]["status"] == "interrupted"


def test_check_on_postgresql_reads_every_table_and_matches_full_text_rows(
    pg_url: str, tmp_path: Path
) -> None:
    from tests.conftest import write_corpus

    from knowtree.core import KnowTree
    from knowtree.store.opening import check_target as full_check
    from knowtree.testing.models import KeywordModel

    write_corpus(tmp_path / "docs")
    with KnowTree(pg_url, model=KeywordModel()) as kt:
        kt.build([str(tmp_path / "docs")], tree="t")
    report = full_check(pg_url)
    assert report.ok and report.trees == 1 and "full-text rows" in report.checked
    store = open_store(pg_url)
    store.write(lambda c: c.execute("DELETE FROM nodes_fts WHERE id = (SELECT MIN(id) FROM nodes_fts)"))
    store.close()
    assert full_check(pg_url).problems == ["full-text rows: 1 node(s) without one, 0 without a node"]
