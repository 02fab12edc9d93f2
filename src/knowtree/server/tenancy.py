"""Tenants and API keys, and how a tenant's tree names map to the database's.

Keys are random (`kt_` + 32 url-safe bytes) and stored only as their SHA-256: a key is shown once,
when it is created. Every tree of a tenant is stored as `TENANT:NAME`, so trees of different tenants
never share a name and a tenant can only ever address its own (nothing of another tenant can be
listed, read or guessed through a route). Whether a stored name is a tenant's is decided by parsing
all of it (`knowtree.store.names`), never by a prefix: a tenant may be named like an internal label
(`kb`, `tree`) without seeing anything of it. The local owner — a server on loopback with no key in
the database — is the `local` principal: it sees every tree under its stored name, like the CLI does.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from knowtree.errors import NotFoundError, UserError
from knowtree.store import SQLiteStore
from knowtree.store.names import SEPARATOR, TENANT_RE, name_for

LOCAL = "local"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Principal:
    """Who is calling: a tenant (through a key), or the local owner (`admin`: every tree)."""

    tenant: str
    key_id: str | None = None
    read_only: bool = False
    admin: bool = False

    def stored(self, name: str) -> str:
        """The database name of this caller's tree `name`."""
        return name if self.admin else f"{self.tenant}{SEPARATOR}{name}"

    def shown(self, stored: str) -> str | None:
        """The name this caller knows a stored tree by, or None when it is not theirs."""
        return stored if self.admin else name_for(stored, self.tenant)


LOCAL_PRINCIPAL = Principal(tenant=LOCAL, admin=True)


@dataclass(frozen=True)
class KeyInfo:
    id: str
    tenant: str
    label: str
    read_only: bool
    created: str
    revoked_at: str | None


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class KeyStore:
    """API keys in the knowtree database (tables from the server migration)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    def create(self, tenant: str, *, label: str = "", read_only: bool = False) -> tuple[str, KeyInfo]:
        """A new key for `tenant` (created on first use). Returns the key — shown only now — and its info."""
        if not TENANT_RE.fullmatch(tenant) or tenant == LOCAL:
            raise UserError(
                f"tenant {tenant!r}: use 1-32 lowercase letters, digits, '-' or '_' (and not {LOCAL!r})"
            )
        key = "kt_" + secrets.token_urlsafe(32)
        key_id = uuid.uuid4().hex[:12]
        now = _now()
        with self.store.transaction() as c:
            c.execute("INSERT OR IGNORE INTO tenants(name, created) VALUES (?, ?)", (tenant, now))
            c.execute(
                "INSERT INTO api_keys(id, tenant, key_hash, label, read_only, created) VALUES (?, ?, ?, ?, ?, ?)",
                (key_id, tenant, hash_key(key), label, int(read_only), now),
            )
        return key, KeyInfo(key_id, tenant, label, read_only, now, None)

    def list(self, tenant: str | None = None) -> list[KeyInfo]:
        sql = "SELECT id, tenant, label, read_only, created, revoked_at FROM api_keys"
        args: tuple[object, ...] = ()
        if tenant:
            sql += " WHERE tenant = ?"
            args = (tenant,)
        rows = self.store.query(sql + " ORDER BY created, id", args)
        return [KeyInfo(r[0], r[1], r[2], bool(r[3]), r[4], r[5]) for r in rows]

    def revoke(self, key_id: str) -> KeyInfo:
        """Revoke a key (revoking it again keeps the first revocation time)."""
        with self.store.transaction() as c:
            c.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (_now(), key_id))
        found = [k for k in self.list() if k.id == key_id]
        if not found:
            raise NotFoundError(f"no API key with id {key_id!r}")
        return found[0]

    def active_count(self) -> int:
        return int(self.store.query("SELECT COUNT(*) FROM api_keys WHERE revoked_at IS NULL")[0][0])

    def verify(self, key: str) -> Principal | None:
        """The principal of a valid, unrevoked key; None otherwise."""
        rows = self.store.query(
            "SELECT id, tenant, read_only, revoked_at FROM api_keys WHERE key_hash = ?", (hash_key(key),)
        )
        if not rows or rows[0][3] is not None:
            return None
        key_id, tenant, read_only, _ = rows[0]
        return Principal(tenant=tenant, key_id=key_id, read_only=bool(read_only))
