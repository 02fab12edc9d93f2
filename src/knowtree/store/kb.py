"""Store helpers for knowledge bases (AutoKB): the tables of the `kbs` migration.

Only the store's public methods (`transaction`, `query`) are used. A build is saved in one
transaction; incremental adds only insert or update rows, and nothing a user stored is removed
unless a rebuild was asked for (`replace=True`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from knowtree.errors import NotFoundError, UserError
from knowtree.records import KBChunk, KBCluster, KBIssue, KBRaw, KBRecord, KBTheme
from knowtree.store.portable import now as _now
from knowtree.store.portable import stored_order, upsert
from knowtree.store.protocol import SQLStore
from knowtree.store.rows import in_batches

__all__ = ["KBChunk", "KBCluster", "KBIssue", "KBRaw", "KBRecord", "KBTheme"]


_KEY = ("kb", "id")
_ISSUE_COLUMNS = (
    "kb", "id", "kind", "parent", "cluster_id", "position", "title", "meta_json", "solution_json", "status",
    "compliance_json",
)  # fmt: skip


# -- writing -------------------------------------------------------------------------------
def create_kb(store: SQLStore, record: KBRecord, *, replace: bool = False) -> None:
    """Register a KB; an existing one is kept unless `replace` (then its rows are deleted)."""
    now = _now()
    with store.transaction() as c:
        row = c.execute("SELECT created FROM kbs WHERE name = ?", (record.name,)).fetchone()
        if row and not replace:
            raise UserError(
                f"a knowledge base named {record.name!r} already exists: add to it with KB.add,"
                " or rebuild it with replace=True"
            )
        if row:
            for table in ("kb_raw_issues", "kb_themes", "kb_clusters", "kb_issues", "kb_chunks"):
                c.execute(f"DELETE FROM {table} WHERE kb = ?", (record.name,))
            c.execute("DELETE FROM kbs WHERE name = ?", (record.name,))
        c.execute(
            "INSERT INTO kbs(name, domain, attributes_json, rules_json, settings_json, model, created, updated)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.name,
                record.domain,
                json.dumps(record.attributes),
                json.dumps(record.rules),
                json.dumps(record.settings),
                record.model,
                row[0] if row else now,
                now,
            ),
        )


def save_parts(
    store: SQLStore,
    kb: str,
    *,
    raw: Sequence[KBRaw] = (),
    themes: Sequence[KBTheme] = (),
    clusters: Sequence[KBCluster] = (),
    issues: Sequence[KBIssue] = (),
    chunks: Sequence[KBChunk] = (),
) -> None:
    """Insert or update rows of a KB, all in one transaction."""
    with store.transaction() as c:
        c.executemany(
            upsert(
                "kb_raw_issues", ("kb", "id", "text", "timestamp", "cluster_id", "issue_id", "added"), _KEY
            ),
            [(kb, r.id, r.text, r.timestamp, r.cluster_id, r.issue_id, _now()) for r in raw],
        )
        c.executemany(
            upsert("kb_themes", ("kb", "id", "name"), _KEY),
            [(kb, t.id, t.name) for t in themes],
        )
        c.executemany(
            upsert("kb_clusters", ("kb", "id", "theme_id", "seed_raw_id", "centroid", "size"), _KEY),
            [(kb, x.id, x.theme_id, x.seed_raw_id, x.centroid, x.size) for x in clusters],
        )
        c.executemany(
            upsert("kb_issues", _ISSUE_COLUMNS, _KEY),
            [
                (
                    kb,
                    i.id,
                    i.kind,
                    i.parent,
                    i.cluster_id,
                    i.position,
                    i.title,
                    json.dumps(i.metadata, sort_keys=True),
                    json.dumps(i.solution) if i.solution is not None else None,
                    i.status,
                    json.dumps(i.compliance),
                )
                for i in issues
            ],
        )
        c.executemany(
            upsert("kb_chunks", ("kb", "id", "doc_id", "source", "path_json", "text", "context"), _KEY),
            [(kb, h.id, h.doc_id, h.source, json.dumps(h.path), h.text, h.context) for h in chunks],
        )
        c.execute("UPDATE kbs SET updated = ? WHERE name = ?", (_now(), kb))


def save_solution(
    store: SQLStore,
    kb: str,
    issue_id: str,
    solution: dict[str, Any] | None,
    status: str,
    compliance: list[dict[str, Any]],
) -> None:
    with store.transaction() as c:
        c.execute(
            "UPDATE kb_issues SET solution_json = ?, status = ?, compliance_json = ? WHERE kb = ? AND id = ?",
            (
                json.dumps(solution) if solution is not None else None,
                status,
                json.dumps(compliance),
                kb,
                issue_id,
            ),
        )


def mark_stale(store: SQLStore, kb: str, issue_ids: Sequence[str]) -> None:
    """Solutions to re-ground (new documents touch them): kept, but marked `stale` until regenerated."""
    with store.transaction() as c:
        c.executemany(
            "UPDATE kb_issues SET status = 'stale' WHERE kb = ? AND id = ? AND solution_json IS NOT NULL",
            [(kb, i) for i in issue_ids],
        )


def set_rules(store: SQLStore, kb: str, rules: list[dict[str, Any]]) -> int:
    """Replace a KB's domain rules; every stored solution is kept but marked `stale` (checked under
    the old rules, it is regenerated at its next ask). Returns how many were marked."""
    kb_record(store, kb)  # fails clearly when the KB does not exist
    with store.transaction() as c:
        c.execute(
            "UPDATE kbs SET rules_json = ?, updated = ? WHERE name = ?", (json.dumps(rules), _now(), kb)
        )
        marked = c.execute(
            "UPDATE kb_issues SET status = 'stale' WHERE kb = ? AND solution_json IS NOT NULL", (kb,)
        ).rowcount
    return int(marked)


def delete_kb(store: SQLStore, name: str) -> None:
    kb_record(store, name)
    with store.transaction() as c:
        for table in ("kb_raw_issues", "kb_themes", "kb_clusters", "kb_issues", "kb_chunks"):
            c.execute(f"DELETE FROM {table} WHERE kb = ?", (name,))
        c.execute("DELETE FROM kbs WHERE name = ?", (name,))


# -- reading -------------------------------------------------------------------------------
def kb_names(store: SQLStore) -> list[str]:
    return [r[0] for r in store.query("SELECT name FROM kbs ORDER BY name")]


def kb_record(store: SQLStore, name: str) -> KBRecord:
    rows = store.query(
        "SELECT name, domain, attributes_json, rules_json, settings_json, model, created, updated"
        " FROM kbs WHERE name = ?",
        (name,),
    )
    if not rows:
        known = ", ".join(kb_names(store)) or "none"
        raise NotFoundError(f"no knowledge base named {name!r} in {store.path} (knowledge bases: {known})")
    r = rows[0]
    return KBRecord(r[0], r[1], json.loads(r[2]), json.loads(r[3]), json.loads(r[4]), r[5], r[6], r[7])


def load_raw(store: SQLStore, kb: str) -> list[KBRaw]:
    rows = store.query(
        "SELECT id, text, timestamp, cluster_id, issue_id FROM kb_raw_issues WHERE kb = ?"
        f" ORDER BY {stored_order(store)}",
        (kb,),
    )
    return [KBRaw(*r) for r in rows]


def load_themes(store: SQLStore, kb: str) -> list[KBTheme]:
    return [
        KBTheme(*r)
        for r in store.query(
            f"SELECT id, name FROM kb_themes WHERE kb = ? ORDER BY {stored_order(store)}", (kb,)
        )
    ]


def load_clusters(store: SQLStore, kb: str) -> list[KBCluster]:
    rows = store.query(
        "SELECT id, theme_id, seed_raw_id, centroid, size FROM kb_clusters WHERE kb = ?"
        f" ORDER BY {stored_order(store)}",
        (kb,),
    )
    return [KBCluster(*r) for r in rows]


def load_issues(store: SQLStore, kb: str) -> list[KBIssue]:
    rows = store.query(
        "SELECT id, kind, parent, cluster_id, title, meta_json, position, solution_json, status, compliance_json"
        f" FROM kb_issues WHERE kb = ? ORDER BY {stored_order(store)}",
        (kb,),
    )
    return [
        KBIssue(
            id=r[0],
            kind=r[1],
            parent=r[2],
            cluster_id=r[3],
            title=r[4],
            metadata=json.loads(r[5]),
            position=r[6],
            solution=json.loads(r[7]) if r[7] else None,
            status=r[8],
            compliance=json.loads(r[9]),
        )
        for r in rows
    ]


_CHUNK_ROWS = "SELECT id, doc_id, source, path_json, text, context FROM kb_chunks WHERE kb = ?"


def load_chunks(store: SQLStore, kb: str, ids: Sequence[str] | None = None) -> list[KBChunk]:
    """Every chunk of the KB in stored order, or only those of `ids` (in that order; unknown ids left out)."""
    if ids is None:
        return [_chunk(r) for r in store.query(_CHUNK_ROWS + f" ORDER BY {stored_order(store)}", (kb,))]
    wanted = list(dict.fromkeys(ids))
    found: dict[str, KBChunk] = {}
    for part, marks in in_batches(wanted):
        rows = store.query(_CHUNK_ROWS + f" AND id IN ({marks})", (kb, *part))
        found.update((r[0], _chunk(r)) for r in rows)
    return [found[i] for i in wanted if i in found]


def _chunk(r: Sequence[Any]) -> KBChunk:
    return KBChunk(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5])
