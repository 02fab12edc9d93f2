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
from knowtree.store import SQLStore, tenants
from knowtree.store.names import SEPARATOR, TENANT_RE, name_for
from knowtree.store.tenants import KeyInfo

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


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class KeyStore:
    """API keys in the knowtree database (tables from the server migration; SQL in store/tenants.py)."""

    def __init__(self, store: SQLStore) -> None:
        self.store = store

    def create(self, tenant: str, *, label: str = "", read_only: bool = False) -> tuple[str, KeyInfo]:
        """A new key for `tenant` (created on first use). Returns the key — shown only now — and its info."""
        if not TENANT_RE.fullmatch(tenant) or tenant == LOCAL:
            raise UserError(
                f"tenant {tenant!r}: use 1-32 lowercase letters, digits, '-' or '_' (and not {LOCAL!r})"
            )
        key = "kt_" + secrets.token_urlsafe(32)
        info = KeyInfo(uuid.uuid4().hex[:12], tenant, label, read_only, _now(), None)
        tenants.add_key(self.store, hash_key(key), info)
        return key, info

    def list(self, tenant: str | None = None) -> list[KeyInfo]:
        return tenants.list_keys(self.store, tenant)

    def revoke(self, key_id: str) -> KeyInfo:
        """Revoke a key (revoking it again keeps the first revocation time)."""
        tenants.revoke_key(self.store, key_id, _now())
        found = [k for k in self.list() if k.id == key_id]
        if not found:
            raise NotFoundError(f"no API key with id {key_id!r}")
        return found[0]

    def active_count(self) -> int:
        return tenants.active_key_count(self.store)

    def verify(self, key: str) -> Principal | None:
        """The principal of a valid, unrevoked key; None otherwise."""
        info = tenants.key_by_hash(self.store, hash_key(key))
        if info is None or info.revoked_at is not None:
            return None
        return Principal(tenant=info.tenant, key_id=info.id, read_only=info.read_only)
