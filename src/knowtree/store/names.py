"""Who owns a stored name. The server stores a tenant's tree or knowledge base `NAME` as
`TENANT:NAME` (`knowtree.server.tenancy.Principal.stored`); this module is the one reading of that
convention, for the server's listings and for the owner column of the runs table.

A stored name belongs to a tenant only when the WHOLE name parses: a tenant name (1-32 lowercase
letters, digits, '-' or '_': never a ':'), one ':', then a name without ':'. Nothing is decided by a
string prefix: `kb:acme:hp` (an internal label over acme's knowledge base) belongs to no tenant,
least of all to a tenant named `kb`.
"""

from __future__ import annotations

import re

TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
SEPARATOR = ":"


def split_owner(stored: str | None) -> tuple[str, str] | None:
    """(tenant, name) when `stored` is a tenant's `TENANT:NAME`, else None."""
    if not stored:
        return None
    owner, sep, name = stored.partition(SEPARATOR)
    if not sep or not name or SEPARATOR in name or not TENANT_RE.fullmatch(owner):
        return None
    return owner, name


def owner_of(stored: str | None) -> str | None:
    """The tenant a stored name belongs to (None: the local owner's, or no tenant's)."""
    parts = split_owner(stored)
    return parts[0] if parts else None


def name_for(stored: str | None, tenant: str) -> str | None:
    """The name `tenant` knows the stored name by, or None when it is not that tenant's."""
    parts = split_owner(stored)
    return parts[1] if parts and parts[0] == tenant else None

