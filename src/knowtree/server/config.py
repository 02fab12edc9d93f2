"""Server settings: where it listens, who may call it, what it accepts."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from knowtree.ingest.roots import ReadRoots

MiB = 1024 * 1024


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="address to bind")
    port: int = Field(8080, ge=0, le=65535)
    auth: Literal["auto", "keys"] = Field(
        "auto",
        description="auto: open (no key) while bound to loopback and no API key exists; keys: always require a key",
    )
    allowed_roots: list[Path] = Field(
        default_factory=list, description="directories whose files builds may read (default: none)"
    )
    tenant_roots: dict[str, list[Path]] = Field(
        default_factory=dict,
        description="per tenant, the directories its builds may read (instead of allowed_roots); a tenant"
        " not named here gets allowed_roots. The local owner (no key) gets allowed_roots",
    )
    upload_dir: Path | None = Field(None, description="where uploaded files wait for their build job")
    max_upload_bytes: int = Field(20 * MiB, ge=1, description="largest upload request")
    max_request_bytes: int = Field(2 * MiB, ge=1, description="largest other request body")
    max_inflated_bytes: int | None = Field(
        None, ge=1,
        description="largest size a compressed file (.gz, a DOCX's parts) may inflate to, in uploads and"
        " builds; default: max_upload_bytes (a compressed upload may bring no more than a plain one)",
    )
    rate_per_second: float = Field(20.0, gt=0, description="requests per second per API key (token bucket)")
    rate_burst: int = Field(60, ge=1, description="bucket size: requests a key may make at once")
    trusted_hosts: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "localhost", "::1"],
        description="loopback servers: Host names accepted (DNS-rebinding guard) and origins allowed to write",
    )
    jobs_worker: bool = Field(True, description="run queued build jobs in this process")
    job_lease_seconds: float = Field(
        30.0, gt=0, le=3600,
        description="a running job stays its worker's this long without a heartbeat (renewed every third"
        " of it); another server on the database takes it over only after that",
    )
    mcp: bool = Field(True, description="mount the MCP server (streamable HTTP) at /mcp")

    @field_validator("allowed_roots")
    @classmethod
    def _resolve(cls, roots: list[Path]) -> list[Path]:
        return [Path(r).expanduser().resolve() for r in roots]

    @field_validator("tenant_roots")
    @classmethod
    def _resolve_each(cls, roots: dict[str, list[Path]]) -> dict[str, list[Path]]:
        return {tenant: cls._resolve(paths) for tenant, paths in roots.items()}

    def roots_for(self, tenant: str | None) -> list[Path]:
        """The directories the builds of `tenant` may read (None: the local owner)."""
        if tenant is not None and tenant in self.tenant_roots:
            return self.tenant_roots[tenant]
        return self.allowed_roots

    def read_roots(self, tenant: str | None) -> ReadRoots:
        """What the builds of `tenant` may read (None: the local owner), as the loaders check it on
        every file (`knowtree.ingest.roots`): under its roots once links and '..' are resolved; for a
        tenant, no file with several hard links (it may be another tenant's file too)."""
        return ReadRoots(tuple(self.roots_for(tenant)), single_link=tenant is not None)

    @property
    def inflate_cap(self) -> int:
        """The decompression cap: `max_inflated_bytes`, else the upload limit itself. Compression saves
        the upload's bandwidth, not the server's memory: what the server refuses as a plain upload it
        refuses compressed too (JSONL and text compress 3-10x, so real compressed uploads under the
        limit rarely come near it; a bomb stops at it)."""
        return self.max_inflated_bytes or self.max_upload_bytes

    @property
    def open_without_keys(self) -> bool:
        """Whether a request without a key may act as the local owner (if no key exists yet)."""
        return self.auth == "auto" and is_loopback(self.host)
