"""Add keys for messages added through the server: what makes a retried or resumed add store each
message once (`Memory.add` skips a message whose key the memory holds).

A message's key is, in this order:

* ``id:<id>``: the client's own message id (`"id"` in the message): the same id is the same message,
  in any request;
* ``req:<key>:<index>:<content>``: the request's idempotency key (the `Idempotency-Key` header or the
  body's `idempotency_key`), the message's place in the request and a hash of what it says: the same
  request sent again stores nothing new, while the same words said twice in one request ("ok", "ok")
  are two messages, and a key reused for a different request does not hide its messages;
* ``job:<job id>:<index>``: a background add without either: the job run again after its server died
  skips the batches already saved;
* none: a synchronous add with neither adds every message (as before).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from knowtree.ingest.chat import ChatMessage, parse_messages

#: longest idempotency key accepted (Stripe's limit)
MAX_KEY = 255


def _digest(*parts: str | None) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(b"\x00" if part is None else b"\x01" + part.encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:20]


def keyed(
    records: Sequence[dict[str, Any] | ChatMessage], idem_key: str | None = None, job_id: str | None = None
) -> list[ChatMessage]:
    """The messages of one add request, validated (`parse_messages`), each with its add key."""
    msgs = parse_messages(records)
    request = _digest(idem_key) if idem_key is not None else None
    out = []
    for i, m in enumerate(msgs):
        if m.id is not None:
            key: str | None = f"id:{m.id}"
        elif request is not None:
            key = f"req:{request}:{i}:{_digest(m.role, m.name, m.content, m.timestamp)}"
        elif job_id is not None:
            key = f"job:{job_id}:{i}"
        else:
            key = None
        out.append(m.model_copy(update={"key": key}))
    return out
