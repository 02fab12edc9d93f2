"""The server's tenants and API keys (tables of the server migration): their SQL, for both dialects.

`server/tenancy.py` decides who may do what (keys, principals, tree names); this module only
stores and reads rows. A key is stored as its SHA-256 only (`key_hash`)."""

from __future__ import annotations

from dataclasses import dataclass

from knowtree.store.portable import insert_new
from knowtree.store.protocol import SQLStore

_KEY_COLUMNS = "id, tenant, label, read_only, created, revoked_at"


@dataclass(frozen=True)
class KeyInfo:
    id: str
    tenant: str
    label: str
    read_only: bool
    created: str
    revoked_at: str | None


def add_key(store: SQLStore, key_hash: str, info: KeyInfo) -> None:
    """Store a key's hash and info, creating its tenant on first use (one transaction)."""
    with store.transaction() as c:
        c.execute(insert_new("tenants", ("name", "created"), ("name",)), (info.tenant, info.created))
        c.execute(
            "INSERT INTO api_keys(id, tenant, key_hash, label, read_only, created) VALUES (?, ?, ?, ?, ?, ?)",
            (info.id, info.tenant, key_hash, info.label, int(info.read_only), info.created),
        )


def list_keys(store: SQLStore, tenant: str | None = None) -> list[KeyInfo]:
    """Every key (of `tenant`), oldest first."""
    sql = f"SELECT {_KEY_COLUMNS} FROM api_keys"
    args: tuple[object, ...] = ()
    if tenant:
        sql += " WHERE tenant = ?"
        args = (tenant,)
    rows = store.query(sql + " ORDER BY created, id", args)
    return [KeyInfo(r[0], r[1], r[2], bool(r[3]), r[4], r[5]) for r in rows]


def revoke_key(store: SQLStore, key_id: str, when: str) -> None:
    """Mark a key revoked at `when` (a key revoked already keeps its first revocation time)."""
    with store.transaction() as c:
        c.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (when, key_id))


def active_key_count(store: SQLStore) -> int:
    return int(store.query("SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL")[0][0])


def key_by_hash(store: SQLStore, key_hash: str) -> KeyInfo | None:
    """The key stored with this hash, revoked or not; None when there is none."""
    rows = store.query(f"SELECT {_KEY_COLUMNS} FROM api_keys WHERE key_hash = ?", (key_hash,))
    if not rows:
        return None
    r = rows[0]
    return KeyInfo(r[0], r[1], r[2], bool(r[3]), r[4], r[5])


__all__ = ["KeyInfo", "active_key_count", "add_key", "key_by_hash", "list_keys", "revoke_key"]
